-- spec/support/splitmix.lua — a seeded random generator (splitmix64) for specs and benchmarks:
-- reproducible from its seed, independent of math.random's global state, the same on every
-- platform (64-bit Lua integers wrap like the C original).
--
--   local splitmix = require "spec.support.splitmix"
--   local rng = splitmix.new(42)
--   rng:next()              64 random bits (any integer)
--   rng:bits()              53 random bits (a non-negative integer)
--   rng:integer(lo, hi)     uniform in [lo, hi] (hi - lo below 2^62)
--   rng:uniform(lo, hi)     uniform float in [lo, hi)
--   rng:chance(p)           true with probability p
--   rng:pick(list)          a uniform element of list
--   rng:weighted(weights)   a key of {key = weight}, drawn by weight (keys sorted, so reproducible)
-- splitmix.Generator is the class, for modules that add methods (spec/support/reference.lua).
local M = {}

local Generator = {}
Generator.__index = Generator
M.Generator = Generator

function M.new(seed)
  return setmetatable({ state = seed }, Generator)
end

function Generator:next()
  self.state = self.state + 0x9E3779B97F4A7C15
  local z = self.state
  z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * 0x94D049BB133111EB
  return z ~ (z >> 31)
end

function Generator:bits() return self:next() >> 11 end
function Generator:uniform(lo, hi) return lo + (hi - lo) * (self:bits() / 2.0 ^ 53) end
function Generator:integer(lo, hi) return lo + (self:next() >> 2) % (hi - lo + 1) end
function Generator:chance(p) return self:uniform(0, 1) < p end
function Generator:pick(list) return list[self:integer(1, #list)] end

function Generator:weighted(weights)
  local keys, total = {}, 0
  for k, w in pairs(weights) do
    keys[#keys + 1] = k
    total = total + w
  end
  table.sort(keys)
  local r = self:uniform(0, total)
  for _, k in ipairs(keys) do
    r = r - weights[k]
    if r < 0 then return k end
  end
  return keys[#keys]
end

return M
