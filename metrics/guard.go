package metrics

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// MutationGuard wraps an admin handler so that reading stays open and
// changing needs a bearer token. GET, HEAD and OPTIONS requests pass to
// next unchanged. Every other method (POST /capture/start, DELETE
// /slowlog, any later runtime control) is a mutation and:
//
//   - with token set, passes only with "Authorization: Bearer <token>"
//     (RFC 6750 §2.1; compared in constant time) and is answered 401 with
//     "WWW-Authenticate: Bearer realm=..." otherwise;
//   - with token empty and open true, passes (a loopback admin address
//     without a token: only this host reaches it);
//   - with token empty and open false, is answered 403 with reason
//     (mutations are off).
//
// The token never appears in an answer.
func MutationGuard(next http.Handler, token string, open bool, reason string) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		switch {
		case token != "":
			// Hash both sides so the comparison's time depends on
			// neither the token's length nor its content.
			got, ok := bearer(r)
			gotSum := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(gotSum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="respmeter admin"`)
				http.Error(w, "unauthorized: this admin endpoint changes state and needs Authorization: Bearer <token> (--admin-token-file)", http.StatusUnauthorized)
				return
			}
		case !open:
			http.Error(w, "forbidden: "+reason, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearer returns the token of r's "Authorization: Bearer <token>" header
// (the scheme is case-insensitive, RFC 6750 §2.1).
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}
