-- spec/codegen/disk_cache_trust_spec.lua — whom the on-disk kernel cache trusts (issue 33, items 11
-- and 13): a cache directory another user owns, or that group or others may write, is refused
-- with a message naming it, its owner and mode and the remedies (whoever can write it can run
-- code as the user: the checksums catch corruption, not forgery); tcl makes its own directory
-- 0700 and its entries 0600; opening the cache removes killed writers' temporary files that are
-- older than 10 minutes, and nothing else. The specs run as root: a directory of "another user"
-- is one chowned to nobody.
local helper = require "spec.support.helper"
local rt = require "tcl.runtime"

local q = helper.shell_quote
local HAVE_RENDERER = pcall(require, "tcl.llvm")

local function sh(cmd)
  local status, out, err = helper.run(cmd)
  assert(status == 0, cmd .. " failed: " .. err)
  return out
end

local fresh_dir = helper.fresh_dir_path

local function mode_of(path) return (sh("stat -c %a " .. q(path)):gsub("\n$", "")) end

local error_of = helper.error_of

local function not_private(dir, mode, writers)
  return string.format("the kernel cache directory %s (owner uid 0, mode %s) is %s: whoever can write to it can "
    .. "run code as you; make it private (chmod 700 %s), use another TCL_CACHE, or turn the disk cache off with "
    .. "CACHELEVEL=0", dir, mode, writers, dir)
end

local function not_yours(dir, mode)
  return string.format("the kernel cache directory %s (owner uid 65534, mode %s) is not yours (you are uid 0): "
    .. "whoever can write to it can run code as you; use a directory of your own as TCL_CACHE, or turn the disk "
    .. "cache off with CACHELEVEL=0", dir, mode)
end

describe("the on-disk kernel cache's trust", function()
  local root
  before_each(function()
    root = fresh_dir()
    sh("mkdir -m 700 " .. q(root))
  end)
  after_each(function() os.execute("rm -rf " .. q(root)) end)

  it("creates a missing directory (and its parents) with mode 0700, and writes its entries 0600", function()
    local dir = root .. "/a/b"
    assert.is_true(rt.cache_open(dir))
    assert.are.equal("700", mode_of(root .. "/a"))
    assert.are.equal("700", mode_of(dir))
    assert.is_true(rt.cache_write(dir, "key", "payload"))
    assert.are.equal("600", mode_of(rt.cache_path(dir, "key")))
    assert.are.equal("payload", rt.cache_read(dir, "key"))
  end)

  it("refuses a directory group or others may write, naming it, its owner and mode, and the remedies", function()
    for _, case in ipairs {
      { "777", "0777", "writable by group and others" },
      { "1777", "1777", "writable by group and others" }, -- sticky: others still add entries
      { "770", "0770", "writable by group" },
      { "703", "0703", "writable by others" },
    } do
      local dir = root .. "/c" .. case[1]
      sh("mkdir " .. q(dir) .. " && chmod " .. case[1] .. " " .. q(dir))
      local message = not_private(dir, case[2], case[3])
      assert.are.equal("runtime.cache_open: " .. message, error_of(rt.cache_open, dir))
      -- every use checks, not only the opening: a forged entry is never read
      assert.are.equal("runtime.cache_read: " .. message, error_of(rt.cache_read, dir, "key"))
      local ok, why = rt.cache_write(dir, "key", "x")
      assert.is_nil(ok)
      assert.are.equal(message, why)
      assert.are.equal("", sh("ls -A " .. q(dir)))
    end
  end)

  it("refuses a directory another user owns, even one only that user may write", function()
    if sh("id -u"):match("^%s*(%d+)") ~= "0" then
      pending("giving a directory to another user (chown) needs root")
      return
    end
    local dir = root .. "/theirs"
    sh("mkdir -m 700 " .. q(dir) .. " && chown nobody " .. q(dir))
    assert.are.equal("runtime.cache_open: " .. not_yours(dir, "0700"), error_of(rt.cache_open, dir))
    assert.are.equal("runtime.cache_read: " .. not_yours(dir, "0700"), error_of(rt.cache_read, dir, "key"))
    assert.are.equal(not_yours(dir, "0700"), select(2, rt.cache_write(dir, "key", "x")))
  end)

  it("checks the final target of a symbolic link, not the link", function()
    local private, shared = root .. "/private", root .. "/shared"
    sh("mkdir -m 700 " .. q(private) .. " && mkdir -m 777 " .. q(shared) .. " && chmod 777 " .. q(shared))
    sh("ln -s " .. q(private) .. " " .. q(root .. "/to_private") .. " && ln -s " .. q(shared) .. " "
      .. q(root .. "/to_shared"))
    assert.is_true(rt.cache_open(root .. "/to_private"))
    assert.is_true(rt.cache_write(root .. "/to_private", "key", "payload"))
    assert.are.equal("payload", rt.cache_read(private, "key"))
    local link = root .. "/to_shared"
    assert.are.equal("runtime.cache_open: " .. not_private(link, "0777", "writable by group and others"),
      error_of(rt.cache_open, link))
  end)

  it("reads an entry another user owns or may write as absent", function()
    assert.is_true(rt.cache_write(root, "theirs", "payload"))
    assert.is_true(rt.cache_write(root, "shared", "payload"))
    sh("chown nobody " .. q(rt.cache_path(root, "theirs")) .. " && chmod 666 " .. q(rt.cache_path(root, "shared")))
    assert.is_nil(rt.cache_read(root, "theirs"))
    assert.is_nil(rt.cache_read(root, "shared"))
    assert.is_true(rt.cache_write(root, "theirs", "payload")) -- a write replaces it with one of ours
    assert.are.equal("payload", rt.cache_read(root, "theirs"))
  end)

  it("removes killed writers' temporary files older than 10 minutes when it opens, and nothing else", function()
    local function plant(name, how, age)
      local path = root .. "/" .. name
      sh(how:format(q(path)) .. " && touch -h -d " .. q(age) .. " " .. q(path))
    end
    plant(".tmp-Ab3xY9", "printf x > %s", "1 hour ago") -- the one to go
    plant(".tmp-Zz0aB1", "printf x > %s", "1 minute ago") -- a writer may still be at work
    plant(".tmp-zz", "printf x > %s", "1 hour ago") -- not the pattern: too short
    plant(".tmp-ABCDEFG", "printf x > %s", "1 hour ago") -- nor 7 characters
    plant(".tmp-AB_DEF", "printf x > %s", "1 hour ago") -- nor other characters
    plant("x.tmp-ABCDEF", "printf x > %s", "1 hour ago")
    plant("notes.txt", "printf x > %s", "1 hour ago")
    plant(".tmp-Dir000", "mkdir %s", "1 hour ago") -- not a regular file
    plant(".tmp-Fifo00", "mkfifo %s", "1 hour ago")
    plant(".tmp-Link00", "ln -s notes.txt %s", "1 hour ago")
    local before = sh("ls -A " .. q(root))
    assert.is_true(rt.cache_open(root))
    assert.are.equal(before:gsub("%.tmp%-Ab3xY9\n", ""), sh("ls -A " .. q(root)))
    assert.is_truthy(before:find(".tmp-Ab3xY9\n", 1, true))
  end)

  it("is checked by a tcl run: an untrusted TCL_CACHE is refused, a trusted one's stale files go", function()
    if not HAVE_RENDERER then
      pending("needs the LLVM renderer (tcl.llvm)")
      return
    end
    local script = root .. "/script.lua"
    helper.write(script, 'print((Tensor.arange(10):cast("float32") * 3 + 1):sum():item())\n')
    local function run(cache, extra)
      return helper.run("env -u DEVICE -u TCLC_LUA_DIR TCL_LUA_DIR=" .. q(helper.root .. "/lua")
        .. " TCL_CACHE=" .. q(cache) .. " " .. (extra or "") .. " " .. q(helper.tcl_bin) .. " " .. q(script))
    end
    local shared = root .. "/shared"
    sh("mkdir " .. q(shared) .. " && chmod 777 " .. q(shared))
    local status, out, err = run(shared)
    assert.are_not.equal(0, status)
    assert.are.equal("", out)
    assert.is_truthy(err:find("realize: " .. not_private(shared, "0777", "writable by group and others"), 1, true), err)
    assert.are.equal("", sh("ls -A " .. q(shared)))
    status, out = run(shared, "CACHELEVEL=0") -- the remedy the message names
    assert.are.equal(0, status)
    assert.are.equal("145.0\n", out)
    -- a fresh TCL_CACHE is made 0700 by the run; a stale temporary file is gone after the next one
    local mine = root .. "/mine"
    status, out = run(mine)
    assert.are.equal(0, status)
    assert.are.equal("145.0\n", out)
    assert.are.equal("700", mode_of(mine))
    sh("printf x > " .. q(mine .. "/.tmp-Stale0") .. " && touch -d '1 hour ago' " .. q(mine .. "/.tmp-Stale0"))
    status = run(mine)
    assert.are.equal(0, status)
    assert.is_false(helper.exists(mine .. "/.tmp-Stale0"))
  end)
end)
