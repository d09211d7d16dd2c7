package command

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"

	"github.com/respmeter/respmeter/routing/command/internal/cmdgen"
)

// startRedis runs redis-server on a free loopback port without persistence
// (internal/redistest) and returns its address; it skips with -short or
// without redis-server.
func startRedis(t *testing.T) string {
	t.Helper()
	return redistest.Start(t).Addr()
}

// rawDo sends one RESP2 command and returns the first reply line.
func rawDo(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c, "$%d\r\n%s\r\n", len(a), a)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(line, "\r\n"), err
}

func TestRedisServer(t *testing.T) {
	addr := startRedis(t)

	reply, err := rawDo(addr, "COMMAND", "COUNT")
	if err != nil {
		t.Fatal(err)
	}
	if want := ":" + strconv.Itoa(NumIDs()-1); reply != want {
		t.Errorf("COMMAND COUNT = %q, want %q (top-level entries in the table)", reply, want)
	}

	f, err := cmdgen.Capture(addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != ServerVersion {
		t.Skipf("local redis-server is %s, table is from %s: skipping exact comparison", f.Version, ServerVersion)
	}
	got, err := cmdgen.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/commands.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("COMMAND INFO of the local redis-server differs from testdata/commands.json; recapture with go run gen.go -capture")
	}
}
