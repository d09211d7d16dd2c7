package configs

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Size is a number of bytes written in configuration as a plain integer
// (bytes) or an integer with a unit: B; KiB, MiB, GiB, TiB (powers of 1024);
// KB, MB, GB, TB (powers of 1000). Units are case-insensitive and may be
// separated from the number by spaces: "512KiB", "64 MiB", "1gib", "1000000".
// Fractions, signs and one-letter units ("64m") are rejected; note that
// KB is 1000 bytes here, not 1024 as in redis.conf.
type Size int64

// Size units, in bytes.
const (
	KiB Size = 1 << 10
	MiB Size = 1 << 20
	GiB Size = 1 << 30
	TiB Size = 1 << 40
)

// sizeUnits maps a lower-cased unit to its multiplier.
var sizeUnits = map[string]Size{
	"":   1,
	"b":  1,
	"kb": 1000, "kib": KiB,
	"mb": 1000 * 1000, "mib": MiB,
	"gb": 1000 * 1000 * 1000, "gib": GiB,
	"tb": 1000 * 1000 * 1000 * 1000, "tib": TiB,
}

// sizeWant describes the accepted forms, for error messages.
const sizeWant = `must be a size in bytes such as 1048576, "512KiB", "64MiB" or "1GiB" (KB/MB/GB are powers of 1000)`

// ParseSize parses s as described for Size.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "-") {
		return 0, fmt.Errorf("must be >= 0 (0 means unlimited), got %q", s)
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	mult, ok := sizeUnits[strings.ToLower(strings.TrimSpace(t[i:]))]
	if i == 0 || !ok {
		return 0, fmt.Errorf("%s, got %q", sizeWant, s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil || n > math.MaxInt64/int64(mult) {
		return 0, fmt.Errorf("must be at most %d bytes (8EiB), got %q", int64(math.MaxInt64), s)
	}
	return Size(n) * mult, nil
}

// String formats s in the largest binary unit that divides it exactly
// ("64MiB", "1GiB", "1500B" as "1500"); 0 is "0". ParseSize reads it back.
func (s Size) String() string {
	for _, u := range []struct {
		name string
		size Size
	}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}} {
		if s != 0 && s%u.size == 0 {
			return strconv.FormatInt(int64(s/u.size), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalYAML writes s as String does; a plain byte count is written as an
// integer.
func (s Size) MarshalYAML() (any, error) {
	str := s.String()
	if n, err := strconv.ParseInt(str, 10, 64); err == nil {
		return n, nil
	}
	return str, nil
}

// UnmarshalYAML reads a size from a scalar node: an integer or a string
// with a unit.
func (s *Size) UnmarshalYAML(value *yaml.Node) error {
	if value.Kind != yaml.ScalarNode || value.Tag == "!!null" {
		return fmt.Errorf("%s, got %s", sizeWant, describeNode(value))
	}
	v, err := ParseSize(value.Value)
	if err != nil {
		return err
	}
	*s = v
	return nil
}
