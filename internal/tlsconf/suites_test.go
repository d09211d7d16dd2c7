package tlsconf

import (
	"crypto/tls"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestParseSuites(t *testing.T) {
	for _, tc := range []struct {
		protocols, ciphers string
		min, max           uint16
		suites             []uint16
		insecure           []string
		err                string // a part of the error; "" for none
	}{
		{"", "", 0, 0, nil, nil, ""},
		{"TLSv1.2 TLSv1.3", "", tls.VersionTLS12, tls.VersionTLS13, nil, nil, ""},
		{"tlsv1.3", "", tls.VersionTLS13, tls.VersionTLS13, nil, nil, ""},
		{"TLSv1.2", "AES128-SHA256", tls.VersionTLS12, tls.VersionTLS12,
			[]uint16{tls.TLS_RSA_WITH_AES_128_CBC_SHA256}, []string{"TLS_RSA_WITH_AES_128_CBC_SHA256"}, ""},
		{"", "ECDHE-RSA-AES128-GCM-SHA256:TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384:ECDHE-RSA-AES128-GCM-SHA256", 0, 0,
			[]uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}, nil, ""},
		{"TLSv1.1 TLSv1.2", "", 0, 0, nil, nil, "protocol TLSv1.1: respmeter speaks TLS 1.2 and 1.3 only"},
		{"TLSv1.2,TLSv1.3", "", 0, 0, nil, nil, `protocol "TLSv1.2,TLSv1.3"`},
		{"", "AES128-SHA256:AES256-SHA256", 0, 0, nil, nil, `cipher "AES256-SHA256": not a TLS 1.2 cipher suite Go's crypto/tls implements`},
		{"", "HIGH:!aNULL", 0, 0, nil, nil, `cipher "HIGH"`},
		{"", "TLS_AES_128_GCM_SHA256", 0, 0, nil, nil, `cipher "TLS_AES_128_GCM_SHA256" is a TLS 1.3 suite`},
		{"", "AES128-SHA::AES256-SHA", 0, 0, nil, nil, "an empty name"},
		{"TLSv1.3", "ECDHE-RSA-AES128-GCM-SHA256", 0, 0, nil, nil, "TLS 1.2 suites are not used by TLS 1.3"},
	} {
		t.Run(tc.protocols+"/"+tc.ciphers, func(t *testing.T) {
			s, err := ParseSuites(tc.protocols, tc.ciphers)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.MinVersion != tc.min || s.MaxVersion != tc.max || !slices.Equal(s.CipherSuites, tc.suites) || !slices.Equal(s.Insecure, tc.insecure) {
				t.Errorf("got %+v, want min %x max %x suites %x insecure %v", s, tc.min, tc.max, tc.suites, tc.insecure)
			}
		})
	}
}

// TestOpenSSLNames checks every OpenSSL name of the table against the
// openssl binary's own list (openssl ciphers -V: "0xC0,0x2F - name ..."),
// for the suites this openssl still knows (OpenSSL 3 builds leave RC4 and
// 3DES out), and that every TLS 1.2 suite Go implements has a name.
func TestOpenSSLNames(t *testing.T) {
	for _, list := range [][]*tls.CipherSuite{tls.CipherSuites(), tls.InsecureCipherSuites()} {
		for _, s := range list {
			if slices.Contains(s.SupportedVersions, tls.VersionTLS12) && openSSLNames[s.ID] == "" {
				t.Errorf("%s has no OpenSSL name", s.Name)
			}
		}
	}
	out, err := exec.Command("openssl", "ciphers", "-V", "ALL:COMPLEMENTOFALL").Output()
	if err != nil {
		t.Skipf("openssl ciphers: %v", err)
	}
	byID := map[uint16]string{}
	for _, line := range strings.Split(string(out), "\n") {
		var a, b uint16
		var name string
		if n, _ := fmt.Sscanf(strings.TrimSpace(line), "0x%X,0x%X - %s", &a, &b, &name); n == 3 {
			byID[a<<8|b] = name
		}
	}
	seen := 0
	for id, name := range openSSLNames {
		if want, ok := byID[id]; ok {
			seen++
			if name != want {
				t.Errorf("suite %#04x: table says %s, openssl says %s", id, name, want)
			}
		}
	}
	if seen < 15 {
		t.Errorf("openssl listed %d of the table's suites, want at least 15:\n%s", seen, out)
	}
}

// TestSuitesDocumented: docs/tls.md's table gives every TLS 1.2 suite Go
// implements, with its OpenSSL name and whether Go lists it as insecure,
// as this Go version does.
func TestSuitesDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/tls.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([A-Z0-9-]+)` \\| `(TLS_[A-Z0-9_]+)` \\| (secure|insecure) \\|$")
	doc := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		doc[m[2]] = m[1] + " " + m[3]
	}
	want := map[string]string{}
	for i, list := range [][]*tls.CipherSuite{tls.CipherSuites(), tls.InsecureCipherSuites()} {
		for _, s := range list {
			if slices.Contains(s.SupportedVersions, tls.VersionTLS12) {
				want[s.Name] = openSSLNames[s.ID] + " " + []string{"secure", "insecure"}[i]
			}
		}
	}
	if !maps.Equal(doc, want) {
		t.Errorf("docs/tls.md's suites table:\n%v\nwant:\n%v", doc, want)
	}
}
