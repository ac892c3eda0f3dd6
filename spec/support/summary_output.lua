-- spec/support/summary_output.lua — busted output handler used by scripts/test.sh.
-- Prints a dot per test while running, then every failure and error with its message
-- and where it happened, every pending test with its reason, and at the very end one
-- machine-readable line that scripts/test.sh adds up over its runs:
--   tclc-summary passed=N failed=N errors=N pending=N
-- Use: busted -o spec/support/summary_output.lua   (busted 2.1 output handler API:
-- a function(options) returning a handler built on busted.outputHandlers.base).

return function(options)
  local busted = require "busted"
  local handler = require "busted.outputHandlers.base"()
  local write = function(s) io.stdout:write(s) io.stdout:flush() end

  local marks = { success = "+", failure = "F", error = "E", pending = "." }

  local function message_text(m)
    if type(m) == "string" then return m end
    if m == nil then return "(no message)" end
    local ok, pretty = pcall(require, "pl.pretty")
    return ok and pretty.write(m) or tostring(m)
  end

  local function where(item)
    local t = (item.element and item.element.trace) or item.trace
    if t and t.short_src then return t.short_src .. ":" .. tostring(t.currentline) end
    return nil
  end

  local function indent(s) return "    " .. s:gsub("\n", "\n    ") end

  local function report(kind, item)
    write(string.format("\n%s %s\n  %s\n", kind, where(item) or "", item.name or "?"))
    write(indent(message_text(item.message)) .. "\n")
    if options.verbose and item.trace and item.trace.traceback then
      write(indent(item.trace.traceback) .. "\n")
    end
  end

  handler.testEnd = function(_, _, status)
    write(marks[status] or "?")
    return nil, true
  end

  -- errors outside an `it` (a spec file that fails to load, a failing before_each...)
  handler.errorOutside = function(element)
    if element.descriptor ~= "it" then write("E") end
    return nil, true
  end

  handler.suiteEnd = function()
    write("\n")
    for _, p in ipairs(handler.pendings) do
      local reason = p.message and (": " .. message_text(p.message)) or ""
      write(string.format("PENDING %s  %s%s\n", where(p) or "", p.name or "?", reason))
    end
    for _, f in ipairs(handler.failures) do report("FAILED", f) end
    for _, e in ipairs(handler.errors) do report("ERROR", e) end
    write(string.format("\n%d passed, %d failed, %d errors, %d pending (%.2f s)\n",
      handler.successesCount, handler.failuresCount, handler.errorsCount,
      handler.pendingsCount, handler.getDuration()))
    write(string.format("tclc-summary passed=%d failed=%d errors=%d pending=%d\n",
      handler.successesCount, handler.failuresCount, handler.errorsCount, handler.pendingsCount))
    return nil, true
  end

  busted.subscribe({ "test", "end" }, handler.testEnd, { predicate = handler.cancelOnPending })
  busted.subscribe({ "suite", "end" }, handler.suiteEnd)
  busted.subscribe({ "error" }, handler.errorOutside)
  busted.subscribe({ "failure" }, handler.errorOutside)

  return handler
end
