package redistest

// SpinScript is a Lua script (EVAL SpinScript 0 <µs>) that keeps the
// engine's command thread on the CPU for ARGV[1] microseconds and returns
// how many times it looped. Its clock is the engine's CPU time (os.clock)
// where the engine's Lua has one (Redis 8.0.6, Valkey 8.1.1 and 9.1.2 have
// it, Redis 7.0 not), else the engine's own wall clock (TIME): those newer
// engines give a script the time it started at, so a spin on TIME there
// never ends (measured: TIME read the same before and after 2 ms of
// os.clock on all three). Either way it is CPU-bound work of a known
// length, unlike DEBUG SLEEP, which sleeps: on TIME a known wall-clock
// length whatever share of a CPU the engine gets, on os.clock a known CPU
// time that lasts longer on a loaded machine, as any CPU-bound command
// does.
const SpinScript = "local us = tonumber(ARGV[1]) local n = 0 local sys = rawget(_G, 'os') " +
	"if sys and sys.clock then local c0 = sys.clock() repeat n = n + 1 until (sys.clock() - c0) * 1000000 >= us " +
	"else local t0 = redis.call('TIME') " +
	"repeat local t = redis.call('TIME') n = n + 1 until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) >= us end return n"
