// Package idemtest starts a real idem server for tests, as net/http/httptest starts an HTTP one:
// `idem serve` on a free loopback port with a temporary data dir and the config you give, ready
// (GET /readyz answered 200) when Start returns, stopped and removed by Close.
//
//	func TestCheckout(t *testing.T) {
//		srv := idemtest.New(t, `[namespaces.orders]
//	default_ttl = "48h"`)
//		c := idem.New(srv.URL)
//		…
//	}
//
// The binary is Options.Bin, else $IDEM_BIN, else $IDEM_TEST_BIN, else `idem` on the PATH. The
// server gets the test's environment without any IDEM_* variable (idem reads those as config), so
// settings of your own shell do not leak into it.
package idemtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Options of Start.
type Options struct {
	// Bin is the idem binary (default: $IDEM_BIN, else $IDEM_TEST_BIN, else idem on the PATH).
	Bin string
	// Config is the TOML config (idem.toml); empty: none.
	Config string
	// Env adds variables to the server's environment, e.g. "IDEM_LOG__LEVEL=debug".
	Env []string
	// StartTimeout bounds the wait for /readyz (default 30 s).
	StartTimeout time.Duration
}

// Server is a running `idem serve`.
type Server struct {
	// URL is the API's base URL, http://127.0.0.1:PORT.
	URL string
	// Dir is the temporary directory holding the config (idem.toml) and the data dir (data/).
	Dir string

	cmd    *exec.Cmd
	exited chan struct{}
	logs   *syncBuffer
	once   sync.Once
}

// Bin is the binary Start runs when Options.Bin is empty.
func Bin() string {
	for _, name := range []string{"IDEM_BIN", "IDEM_TEST_BIN"} {
		if v := os.Getenv(name); v != "" {
			return v
		}
	}
	return "idem"
}

// New starts a server with the given config (TOML, may be empty) and stops it when the test ends;
// it fails the test if the server does not start.
func New(tb testing.TB, config string) *Server {
	tb.Helper()
	s, err := Start(Options{Config: config})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// Start starts `idem serve --listen 127.0.0.1:0` with a temporary data dir and returns once it
// answers GET /readyz with 200. The port is read from the server's own log line
// ("idem listening", addr=…), so there is no race for a free port.
func Start(opts Options) (*Server, error) {
	bin := opts.Bin
	if bin == "" {
		bin = Bin()
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("idemtest: the idem binary %q: %w (build it with `cargo build -p idem-server`, or set IDEM_BIN)", bin, err)
	}
	dir, err := os.MkdirTemp("", "idemtest-")
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")}
	if opts.Config != "" {
		file := filepath.Join(dir, "idem.toml")
		if err := os.WriteFile(file, []byte(opts.Config), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args = append(args, "--config", file)
	}
	cmd := exec.Command(path, args...)
	// JSON logs, so that the listening address can be read whatever the terminal.
	cmd.Env = append(append(serverEnv(), "IDEM_LOG__FORMAT=json"), opts.Env...)
	addr := make(chan string, 1)
	s := &Server{Dir: dir, cmd: cmd, exited: make(chan struct{}), logs: &syncBuffer{}}
	cmd.Stdout = s.logs
	// A Writer rather than a pipe: Wait returns only once everything written was copied.
	cmd.Stderr = &logWriter{logs: s.logs, addr: addr}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("idemtest: starting %s: %w", path, err)
	}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()

	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	deadline := time.After(timeout)
	select {
	case a := <-addr:
		s.URL = "http://" + a
	case <-s.exited:
		err := fmt.Errorf("idemtest: idem serve exited before listening: %s\n%s", cmd.ProcessState, s.Logs())
		os.RemoveAll(dir)
		return nil, err
	case <-deadline:
		_ = s.Close()
		return nil, fmt.Errorf("idemtest: idem serve did not say where it listens within %s:\n%s", timeout, s.Logs())
	}
	if err := s.waitReady(deadline); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// logWriter copies the server's log into logs and sends the address of its "idem listening"
// line on addr.
type logWriter struct {
	logs    *syncBuffer
	addr    chan<- string
	partial []byte
	sent    bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.logs.Write(p)
	if w.sent {
		return len(p), nil
	}
	w.partial = append(w.partial, p...)
	for {
		nl := bytes.IndexByte(w.partial, '\n')
		if nl < 0 {
			return len(p), nil
		}
		line := w.partial[:nl]
		w.partial = w.partial[nl+1:]
		var entry struct {
			Fields struct {
				Message string `json:"message"`
				Addr    string `json:"addr"`
			} `json:"fields"`
		}
		if json.Unmarshal(line, &entry) == nil && entry.Fields.Message == "idem listening" && entry.Fields.Addr != "" {
			w.addr <- entry.Fields.Addr
			w.sent, w.partial = true, nil
			return len(p), nil
		}
	}
}

func (s *Server) waitReady(deadline <-chan time.Time) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		res, err := client.Get(s.URL + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("idemtest: idem serve exited: %s\n%s", s.cmd.ProcessState, s.Logs())
		case <-deadline:
			return fmt.Errorf("idemtest: %s/readyz did not answer 200 in time (last error: %v):\n%s", s.URL, err, s.Logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Logs is everything the server has logged so far (JSON lines).
func (s *Server) Logs() string { return s.logs.String() }

// Close stops the server (SIGTERM, then SIGKILL after 10 s) and removes its directory.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(10 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.exited
				err = errors.New("idemtest: idem serve did not stop on SIGTERM within 10 s; killed")
			}
		}
		if rerr := os.RemoveAll(s.Dir); err == nil {
			err = rerr
		}
	})
	return err
}

// serverEnv is this process's environment without IDEM_* variables: idem reads every one as
// config (IDEM_BIN would be the unknown key `bin`).
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") {
			env = append(env, kv)
		}
	}
	return env
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
