-- spec/support/child_env.lua — busted helper (--helper) for scripts/test.sh's sanitized run:
-- loads the module built from spec/support/child_env.c (path in TCLC_CHILD_ENV_LIB), which
-- gives programs started by specs the environment the script had instead of the interpreter's
-- LD_PRELOAD and ASAN_OPTIONS. See child_env.c for why.
local lib = os.getenv("TCLC_CHILD_ENV_LIB")
if lib and lib ~= "" then
  local open = assert(package.loadlib(lib, "luaopen_tclc_child_env"))
  open()
end
