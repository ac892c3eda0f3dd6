-- tcl.onnx.ops — the registry of ONNX op handlers: one file per domain of ops,
-- merged here; an op type defined twice is an error naming both files.
--
-- A handler is `function(ctx, node) return out1, out2, ... end` (or one list of outputs):
--   node.inputs[i]   the value of ONNX input i-1 (a Tensor, a sequence {kind="sequence", ...},
--                    or nil for an omitted optional input); node.ninputs counts omitted ones
--   node.attrs.name  INT -> integer, FLOAT -> number, STRING -> string, INTS/FLOATS/STRINGS ->
--                    lists, TENSOR -> Tensor, GRAPH -> a subgraph (lua/tcl/onnx/init.lua's Graph:
--                    graph:run(ctx, inputs) -> outputs), absent -> nil
--   node.op_type, node.name, node.domain, node.opset (the model's opset for the node's domain),
--   node.noutputs, node.wants(i) (whether output i, 1-based, is used)
--   ctx:ints(t) / ctx:numbers(t) / ctx:values(t)  a small tensor's values as a flat Lua list
--   ctx:known(t, values)  records host values of a tensor a handler made (shape arithmetic)
--   ctx:fail(fmt, ...)    an error naming the model, the node and its op type
-- ONNX's 0-based indices and axes are converted to tcl's 1-based API inside the handlers.
-- Only a domain file's capitalized keys are op types: lower-case ones are helpers it shares.
-- A file of ops of another ONNX domain than ai.onnx says so in `onnx_domain`; its op types are
-- registered as "<onnx_domain>.<OpType>" (the key the loader looks up for such nodes).
local M = {}

M.DOMAINS = {
  "core",
  "shape_ops",
  "sorting",
  "elementwise",
  "reduce",
  "losses",
  "indexing",
  "math",
  "sequence",
  "conv",
  "scan_ops",
  "training",
  "signal",
  "quantize",
  "control",
  "text",
  "normalization_rnn",
}

M.handlers, M.owner = {}, {}
for _, domain in ipairs(M.DOMAINS) do
  local module = require("tcl.onnx.ops." .. domain)
  for name, handler in pairs(module) do
    if not name:match("^%u") then goto helper end
    local op_type = module.onnx_domain and (module.onnx_domain .. "." .. name) or name
    if M.owner[op_type] then
      error(string.format("tcl.onnx.ops: op type %s is defined in both ops/%s.lua and ops/%s.lua", op_type,
        M.owner[op_type], domain))
    end
    M.handlers[op_type], M.owner[op_type] = handler, domain
    ::helper::
  end
end

return M
