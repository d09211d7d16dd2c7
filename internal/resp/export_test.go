package resp

// RequestCase is a request case of request_test.go for the oracle tests
// (oracle_test.go, package resp_test).
type RequestCase struct {
	Name string
	In   []byte
	Err  error    // BadRequestCases: nil when Redis waits for more bytes
	Kind Kind     // ValidRequestCases: the frame's kind (0: it waits)
	Args []string // ValidRequestCases: the arguments
}

// BadRequestCases returns the malformed requests of request_test.go.
func BadRequestCases() []RequestCase {
	var out []RequestCase
	for _, c := range badRequests() {
		out = append(out, RequestCase{Name: c.name, In: c.in, Err: c.err})
	}
	return out
}

// ValidRequestCases returns the well-formed requests of request_test.go.
func ValidRequestCases() []RequestCase {
	var out []RequestCase
	for _, c := range reqCases {
		out = append(out, RequestCase{Name: c.name, In: []byte(c.in), Kind: c.kind, Args: c.args})
	}
	return out
}
