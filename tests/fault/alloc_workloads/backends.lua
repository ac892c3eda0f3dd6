-- What a state loads once, on first use: the CPU device's backend (the LLVM renderer's native
-- module) and the EMU device's. Run with --open: every run in a new state.
require "tcl.codegen.devices.llvm"
require "tcl.codegen.devices.emu"
