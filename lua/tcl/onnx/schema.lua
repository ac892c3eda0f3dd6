-- tcl.onnx.schema — the ONNX protobuf messages tcl reads, with their field numbers from
-- onnx.proto (ONNX 1.12; spec/io/onnx_reader_spec.lua checks every number against the
-- onnx.proto that libonnx-dev installs). Fields tcl does not use are left out: the decoder skips
-- them. `blob` marks bytes decoded as {offset, length} in the file instead of a string (raw_data:
-- weights stay in the file's mapping).
local M = {}

local function message(name, fields)
  local by_number = {}
  for _, f in ipairs(fields) do by_number[f[2]] = { name = f[1], kind = f[3], repeated = f[4] == "repeated" } end
  return { name = name, fields = by_number, list = fields }
end

-- Message-typed fields are linked after every message exists (they refer to each other).
local function link(schema, field_name, target)
  for _, f in pairs(schema.fields) do
    if f.name == field_name then f.message, f.kind = target, "message" return end
  end
  error("schema: no field " .. field_name .. " in " .. schema.name)
end

M.StringStringEntryProto = message("StringStringEntryProto", { { "key", 1, "string" }, { "value", 2, "string" } })
M.OperatorSetIdProto = message("OperatorSetIdProto", { { "domain", 1, "string" }, { "version", 2, "int" } })
M.TensorShapeProto_Dimension = message("TensorShapeProto.Dimension",
  { { "dim_value", 1, "int" }, { "dim_param", 2, "string" }, { "denotation", 3, "string" } })
M.TensorShapeProto = message("TensorShapeProto", { { "dim", 1, "message", "repeated" } })
M.TypeProto_Tensor = message("TypeProto.Tensor", { { "elem_type", 1, "int" }, { "shape", 2, "message" } })
M.TypeProto_Sequence = message("TypeProto.Sequence", { { "elem_type", 1, "message" } })
M.TypeProto_Optional = message("TypeProto.Optional", { { "elem_type", 1, "message" } })
M.TypeProto_Map = message("TypeProto.Map", { { "key_type", 1, "int" }, { "value_type", 2, "message" } })
M.TypeProto = message("TypeProto", {
  { "tensor_type", 1, "message" }, { "sequence_type", 4, "message" }, { "map_type", 5, "message" },
  { "denotation", 6, "string" }, { "sparse_tensor_type", 8, "message" }, { "optional_type", 9, "message" },
})
M.ValueInfoProto = message("ValueInfoProto", { { "name", 1, "string" }, { "type", 2, "message" },
  { "doc_string", 3, "string" } })
M.TensorProto = message("TensorProto", {
  { "dims", 1, "int", "repeated" }, { "data_type", 2, "int" },
  { "float_data", 4, "float", "repeated" }, { "int32_data", 5, "int", "repeated" },
  { "string_data", 6, "bytes", "repeated" }, { "int64_data", 7, "int", "repeated" },
  { "name", 8, "string" }, { "raw_data", 9, "blob" }, { "double_data", 10, "double", "repeated" },
  { "uint64_data", 11, "uint", "repeated" }, { "doc_string", 12, "string" },
  { "external_data", 13, "message", "repeated" }, { "data_location", 14, "int" },
})
M.SparseTensorProto = message("SparseTensorProto", { { "values", 1, "message" }, { "indices", 2, "message" },
  { "dims", 3, "int", "repeated" } })
M.AttributeProto = message("AttributeProto", {
  { "name", 1, "string" }, { "f", 2, "float" }, { "i", 3, "int" }, { "s", 4, "bytes" }, { "t", 5, "message" },
  { "g", 6, "message" }, { "floats", 7, "float", "repeated" }, { "ints", 8, "int", "repeated" },
  { "strings", 9, "bytes", "repeated" }, { "tensors", 10, "message", "repeated" },
  { "graphs", 11, "message", "repeated" }, { "doc_string", 13, "string" }, { "tp", 14, "message" },
  { "type_protos", 15, "message", "repeated" }, { "type", 20, "int" }, { "ref_attr_name", 21, "string" },
  { "sparse_tensor", 22, "message" }, { "sparse_tensors", 23, "message", "repeated" },
})
M.NodeProto = message("NodeProto", {
  { "input", 1, "string", "repeated" }, { "output", 2, "string", "repeated" }, { "name", 3, "string" },
  { "op_type", 4, "string" }, { "attribute", 5, "message", "repeated" }, { "doc_string", 6, "string" },
  { "domain", 7, "string" },
})
M.GraphProto = message("GraphProto", {
  { "node", 1, "message", "repeated" }, { "name", 2, "string" }, { "initializer", 5, "message", "repeated" },
  { "doc_string", 10, "string" }, { "input", 11, "message", "repeated" }, { "output", 12, "message", "repeated" },
  { "value_info", 13, "message", "repeated" }, { "sparse_initializer", 15, "message", "repeated" },
})
M.FunctionProto = message("FunctionProto", {
  { "name", 1, "string" }, { "input", 4, "string", "repeated" }, { "output", 5, "string", "repeated" },
  { "attribute", 6, "string", "repeated" }, { "node", 7, "message", "repeated" }, { "doc_string", 8, "string" },
  { "opset_import", 9, "message", "repeated" }, { "domain", 10, "string" },
})
M.ModelProto = message("ModelProto", {
  { "ir_version", 1, "int" }, { "producer_name", 2, "string" }, { "producer_version", 3, "string" },
  { "domain", 4, "string" }, { "model_version", 5, "int" }, { "doc_string", 6, "string" },
  { "graph", 7, "message" }, { "opset_import", 8, "message", "repeated" },
  { "metadata_props", 14, "message", "repeated" }, { "functions", 25, "message", "repeated" },
})
-- test data of the conformance suite: inputs and outputs that are sequences or optionals
M.SequenceProto = message("SequenceProto", {
  { "name", 1, "string" }, { "elem_type", 2, "int" }, { "tensor_values", 3, "message", "repeated" },
  { "sparse_tensor_values", 4, "message", "repeated" }, { "sequence_values", 5, "message", "repeated" },
  { "optional_values", 7, "message", "repeated" },
})
M.OptionalProto = message("OptionalProto", {
  { "name", 1, "string" }, { "elem_type", 2, "int" }, { "tensor_value", 3, "message" },
  { "sparse_tensor_value", 4, "message" }, { "sequence_value", 5, "message" }, { "optional_value", 7, "message" },
})

link(M.TensorShapeProto, "dim", M.TensorShapeProto_Dimension)
link(M.TypeProto_Tensor, "shape", M.TensorShapeProto)
link(M.TypeProto_Sequence, "elem_type", M.TypeProto)
link(M.TypeProto_Optional, "elem_type", M.TypeProto)
link(M.TypeProto_Map, "value_type", M.TypeProto)
link(M.TypeProto, "tensor_type", M.TypeProto_Tensor)
link(M.TypeProto, "sequence_type", M.TypeProto_Sequence)
link(M.TypeProto, "map_type", M.TypeProto_Map)
link(M.TypeProto, "sparse_tensor_type", M.TypeProto_Tensor)
link(M.TypeProto, "optional_type", M.TypeProto_Optional)
link(M.ValueInfoProto, "type", M.TypeProto)
link(M.TensorProto, "external_data", M.StringStringEntryProto)
link(M.SparseTensorProto, "values", M.TensorProto)
link(M.SparseTensorProto, "indices", M.TensorProto)
link(M.AttributeProto, "t", M.TensorProto)
link(M.AttributeProto, "g", M.GraphProto)
link(M.AttributeProto, "tensors", M.TensorProto)
link(M.AttributeProto, "graphs", M.GraphProto)
link(M.AttributeProto, "tp", M.TypeProto)
link(M.AttributeProto, "type_protos", M.TypeProto)
link(M.AttributeProto, "sparse_tensor", M.SparseTensorProto)
link(M.AttributeProto, "sparse_tensors", M.SparseTensorProto)
link(M.NodeProto, "attribute", M.AttributeProto)
link(M.GraphProto, "node", M.NodeProto)
link(M.GraphProto, "initializer", M.TensorProto)
link(M.GraphProto, "input", M.ValueInfoProto)
link(M.GraphProto, "output", M.ValueInfoProto)
link(M.GraphProto, "value_info", M.ValueInfoProto)
link(M.GraphProto, "sparse_initializer", M.SparseTensorProto)
link(M.FunctionProto, "node", M.NodeProto)
link(M.FunctionProto, "opset_import", M.OperatorSetIdProto)
link(M.ModelProto, "graph", M.GraphProto)
link(M.ModelProto, "opset_import", M.OperatorSetIdProto)
link(M.ModelProto, "metadata_props", M.StringStringEntryProto)
link(M.ModelProto, "functions", M.FunctionProto)
link(M.SequenceProto, "tensor_values", M.TensorProto)
link(M.SequenceProto, "sparse_tensor_values", M.SparseTensorProto)
link(M.SequenceProto, "sequence_values", M.SequenceProto)
link(M.SequenceProto, "optional_values", M.OptionalProto)
link(M.OptionalProto, "tensor_value", M.TensorProto)
link(M.OptionalProto, "sparse_tensor_value", M.SparseTensorProto)
link(M.OptionalProto, "sequence_value", M.SequenceProto)
link(M.OptionalProto, "optional_value", M.OptionalProto)

return M
