package command

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/routing/command/internal/cmdgen"
)

// startRedis runs redis-server without persistence in a temp dir on a free
// port, waits for PING and returns its address. It skips the test with -short
// or when redis-server is not in PATH.
func startRedis(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping redis-server integration test in -short mode")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("skipping: redis-server not in PATH")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", dir+"/redis.log")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		reply, err := rawDo(addr, "PING")
		if err == nil && reply == "+PONG" {
			return addr
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(dir + "/redis.log")
			t.Fatalf("redis-server on %s not ready: %v %q\n%s", addr, err, reply, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
