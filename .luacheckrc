-- .luacheckrc — luacheck's configuration (scripts/test.sh runs `luacheck .`; zero warnings).
std = "lua54"
max_line_length = 120

-- busted's globals (describe, it, assert, pending, ...) in the specs
files["spec/**/*_spec.lua"] = { std = "+busted" }

-- Scripts run by the `tcl` program, which preloads the globals `tcl` and `Tensor`
files["examples/*.lua"] = { read_globals = { "tcl", "Tensor" } }
files["bench/intern_bench.lua"] = { read_globals = { "tcl", "Tensor" } }
-- The model script of examples/embed/inference.c: run in a tclc state, it defines the globals
-- its host calls
files["examples/embed/classifier.lua"] = { read_globals = { "tcl", "Tensor" }, globals = { "classify", "classify_lazy" } }

-- Build trees and the GPU bundle (scripts/gpu_bundle.sh: copies of busted's modules) hold no
-- sources of ours
exclude_files = { "build*/**", ".gpu/**" }
