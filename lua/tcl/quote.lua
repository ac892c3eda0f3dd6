-- tcl.quote — a user's string (a name, a key, an option) as it appears in an error message:
-- whole when short, else its start, an ellipsis and its length, so that a 400 KB name makes a
-- message of a line. The C API bounds the host's strings the same way (src/api/quote.c).
-- Layer: lua/tcl (no dependencies).

local MAX_BYTES = 160 -- strings up to this long are shown whole
local KEPT_BYTES = 120 -- longer ones by this many first bytes (fewer at a UTF-8 boundary)

--- s bounded as above; values that are not strings by tostring first.
return function(s)
  s = type(s) == "string" and s or tostring(s)
  if #s <= MAX_BYTES then return s end
  local keep = KEPT_BYTES
  while keep > 0 and s:byte(keep + 1) & 0xC0 == 0x80 do keep = keep - 1 end -- a continuation byte
  return string.format("%s... (%d bytes)", s:sub(1, keep), #s)
end
