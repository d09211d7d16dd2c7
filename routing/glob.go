package routing

// MatchGlob reports whether key s matches pattern pat by Redis's glob rules
// (stringmatchlen in util.c, as KEYS and SCAN MATCH use): * any run, ? one
// byte, [abc], [^abc], [a-z] a class, \ escapes the next byte.
func MatchGlob(pat, s []byte) bool {
	for len(pat) > 0 {
		switch pat[0] {
		case '*':
			for len(pat) > 1 && pat[1] == '*' {
				pat = pat[1:]
			}
			if len(pat) == 1 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if MatchGlob(pat[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
			s = s[1:]
			pat = pat[1:]
		case '[':
			if len(s) == 0 {
				return false
			}
			pat = pat[1:]
			not := len(pat) > 0 && pat[0] == '^'
			if not {
				pat = pat[1:]
			}
			hit := false
			for len(pat) > 0 && pat[0] != ']' {
				switch {
				case pat[0] == '\\' && len(pat) >= 2:
					hit = hit || pat[1] == s[0]
					pat = pat[2:]
				case len(pat) >= 3 && pat[1] == '-':
					lo, hi := pat[0], pat[2]
					if lo > hi {
						lo, hi = hi, lo
					}
					hit = hit || s[0] >= lo && s[0] <= hi
					pat = pat[3:]
				default:
					hit = hit || pat[0] == s[0]
					pat = pat[1:]
				}
			}
			if len(pat) > 0 {
				pat = pat[1:] // ']'
			}
			if hit == not {
				return false
			}
			s = s[1:]
		case '\\':
			if len(pat) >= 2 {
				pat = pat[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || pat[0] != s[0] {
				return false
			}
			s = s[1:]
			pat = pat[1:]
		}
	}
	return len(s) == 0
}
