package redistest

import "runtime/debug"

// RaceEnabled reports whether the test binary was built with -race: timing
// comparisons are made without the detector's work on the hot path.
func RaceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
