-- tcl.export.objects — the kernels' object code as files a C compiler links: each kernel's
-- entry symbol renamed and hidden, then all kernels combined into one object. Layer: export
-- (over the CPU backend's compiled kernels, tcl.codegen.devices.llvm).
--
-- A kernel compiled by tcl is an ELF relocatable object (PIC) that defines one global symbol,
-- its entry "tcl_<hash>" (named after the kernel's cache key, so identical code shares it).
-- Linked into a program as it is, that name would clash when two exported models share a
-- kernel, and it would be exported from a shared library built from the files. So every entry
-- is renamed to "<name>_kernel_<hash>" and given hidden visibility (the linker makes it local
-- in the final program). Renaming edits the ELF in place of a tool: the new names are
-- appended to a copy of the symbol string table placed at the end of the file, the symbol
-- table's entries point at them, and the string table's section header points at the copy;
-- every other byte stays where it was, so relocations and other sections are untouched.
--
-- Combining: `ld -r` (when the linker is on PATH) merges the renamed objects into
-- <name>_kernels.o, one file for users to link; without it, one <name>_kernel_<i>.o per kernel
-- is written (the build line lists them all).
local runtime = require "tcl.runtime"

local M = {}

local ELF_MAGIC = "\127ELF"
local ELFCLASS64, ELFDATA2LSB = 2, 1
local SHT_SYMTAB = 2
local STV_HIDDEN = 2
local SECTION_HEADER_BYTES, SYMBOL_BYTES = 64, 24

--- Whether object is an ELF file this module can edit (64-bit, little-endian).
function M.editable(object)
  return #object >= 64 and object:sub(1, 4) == ELF_MAGIC and object:byte(5) == ELFCLASS64
    and object:byte(6) == ELFDATA2LSB
end

-- The section headers of an ELF64 little-endian object: a list of tables (1-based, as the
-- section index + 1) with the fields this module reads, and each header's byte position.
local function section_headers(object)
  local shoff = string.unpack("<I8", object, 0x28 + 1)
  local shentsize, shnum = string.unpack("<I2I2", object, 0x3A + 1)
  if shentsize ~= SECTION_HEADER_BYTES or shoff + shnum * shentsize > #object then
    error("export: a kernel's object code has malformed section headers", 0)
  end
  local list = {}
  for i = 0, shnum - 1 do
    local at = shoff + i * shentsize
    local name, kind, _, _, offset, size, link = string.unpack("<I4I4I8I8I8I8I4", object, at + 1)
    list[i + 1] = { at = at, name = name, kind = kind, offset = offset, size = size, link = link }
  end
  return list
end

-- object with v packed by format written at byte position at (0-based).
local function patch(object, at, format, v)
  local bytes = string.pack(format, v)
  return object:sub(1, at) .. bytes .. object:sub(at + #bytes + 1)
end

--- The object with its global symbols renamed (renames: { [old name] = new name }) and made
-- hidden. Every old name must be defined in the object; an error says which is missing.
function M.rename(object, renames)
  if not M.editable(object) then error("export: a kernel's object code is not a 64-bit little-endian ELF file", 0) end
  local sections = section_headers(object)
  local symtab
  for _, s in ipairs(sections) do
    if s.kind == SHT_SYMTAB then symtab = s break end
  end
  if not symtab or not sections[symtab.link + 1] or symtab.offset + symtab.size > #object then
    error("export: a kernel's object code has no symbol table", 0)
  end
  local strtab = sections[symtab.link + 1]
  local strings = object:sub(strtab.offset + 1, strtab.offset + strtab.size)
  local pending = {}
  for old in pairs(renames) do pending[old] = true end
  local appended, appended_bytes, edits = {}, 0, {}
  for at = symtab.offset, symtab.offset + symtab.size - SYMBOL_BYTES, SYMBOL_BYTES do
    local name_at, _, other = string.unpack("<I4BB", object, at + 1)
    local name = strings:match("^[^%z]*", name_at + 1)
    local new = renames[name]
    if new and pending[name] then
      pending[name] = nil
      edits[#edits + 1] = { at = at, name = #strings + appended_bytes, other = (other & ~3) | STV_HIDDEN }
      appended[#appended + 1] = new .. "\0"
      appended_bytes = appended_bytes + #new + 1
    end
  end
  local missing = next(pending)
  if missing then error("export: a kernel's object code does not define its entry '" .. missing .. "'", 0) end
  -- the new string table: the old one (its offsets stay valid: section names may live there
  -- too) and the new names, placed at the end of the file, 8-byte aligned
  local padding = string.rep("\0", (8 - #object % 8) % 8)
  local new_offset = #object + #padding
  local new_strings = strings .. table.concat(appended)
  for _, e in ipairs(edits) do
    object = patch(object, e.at, "<I4", e.name)
    object = patch(object, e.at + 5, "B", e.other)
  end
  object = patch(object, strtab.at + 24, "<I8", new_offset)
  object = patch(object, strtab.at + 32, "<I8", #new_strings)
  return object .. padding .. new_strings
end

local function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- runtime.replace_file: complete or absent, every write checked, errno's own message
local function write_file(path, bytes)
  local ok, err = pcall(runtime.replace_file, path, { bytes })
  if not ok then error("export: " .. tostring(err):gsub("^runtime%.replace_file: ", ""), 0) end
end

--- Whether `ld` (the system linker, for `ld -r`) can be run.
function M.have_linker()
  local ok = os.execute("command -v ld >/dev/null 2>&1")
  return ok == true
end

--- Writes the kernels' objects into dir. kernels: a list of { object =, entry =, symbol = }
-- (symbol: the new name; the object is written as it is when symbol is entry). Returns the
-- list of file names written (relative to dir): one combined "<name>_kernels.o" when `ld -r`
-- works (and combine is not false), else one file per kernel.
function M.write(dir, name, kernels, combine)
  local parts = {}
  for i, k in ipairs(kernels) do
    parts[i] = string.format("%s_kernel_%d.o", name, i)
    write_file(dir .. "/" .. parts[i], k.symbol == k.entry and k.object or M.rename(k.object, { [k.entry] = k.symbol }))
  end
  if combine ~= false and M.have_linker() then
    local combined = name .. "_kernels.o"
    local quoted = {}
    for i, part in ipairs(parts) do quoted[i] = shell_quote(dir .. "/" .. part) end
    local log = os.tmpname()
    local ok = os.execute(string.format("ld -r -o %s %s >%s 2>&1", shell_quote(dir .. "/" .. combined),
      table.concat(quoted, " "), shell_quote(log)))
    local f = io.open(log, "rb")
    local message = f and f:read("a") or ""
    if f then f:close() end
    os.remove(log)
    for _, part in ipairs(parts) do os.remove(dir .. "/" .. part) end
    if ok == true then return { combined } end
    os.remove(dir .. "/" .. combined)
    error(string.format("export: `ld -r` could not combine the kernels' objects into '%s/%s': %s", dir, combined,
      message), 0)
  end
  return parts
end

return M
