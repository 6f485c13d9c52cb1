package main

// Runs the curator twice in a row against a real idem started with examples/articles/idem.toml
// (the binary in $IDEM_BIN, default ../../target/debug/idem) and a fake Discord that counts posts.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idem-dev/idem/clients/go"
	"github.com/idem-dev/idem/clients/go/idemtest"
)

func idemBin() string {
	if b := idemtest.Bin(); b != "idem" {
		return b
	}
	return "../../target/debug/idem"
}

func startIdem(t *testing.T, withConfig bool) *idemtest.Server {
	t.Helper()
	config := ""
	if withConfig {
		b, err := os.ReadFile("../articles/idem.toml")
		if err != nil {
			t.Fatal(err)
		}
		config = string(b)
	}
	s, err := idemtest.Start(idemtest.Options{Bin: idemBin(), Config: config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// discord is a fake Discord webhook: it records every post, and fails those whose content
// contains one of failing.
type discord struct {
	mu      sync.Mutex
	posts   []string
	failing []string
}

func (d *discord) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var msg struct{ Content string }
	_ = json.NewDecoder(r.Body).Decode(&msg)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.failing {
		if strings.Contains(msg.Content, f) {
			http.Error(w, "rate limited", http.StatusInternalServerError)
			return
		}
	}
	d.posts = append(d.posts, msg.Content)
	w.WriteHeader(http.StatusNoContent)
}

func (d *discord) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.posts)
}

func runIt(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, args, &out, &errOut)
	t.Logf("articles-go %s → %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

func TestTwiceInARow(t *testing.T) {
	srv := startIdem(t, true)
	d := &discord{}
	hook := httptest.NewServer(d)
	defer hook.Close()

	code, out, _ := runIt(t, "-url", srv.URL, "-discord", hook.URL)
	if code != 0 {
		t.Fatalf("first run exited %d", code)
	}
	for _, want := range []string{
		"feed: 1200 articles, 0 decided before, 1200 new",
		"rejected 120 (kept 30 days), claimed 1080 to announce (kept 90 days)",
		"announced 1080 new articles to Discord",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("first run: %q missing from\n%s", want, out)
		}
	}
	if d.count() != 1080 {
		t.Fatalf("%d posts, want 1080", d.count())
	}
	distinct := map[string]bool{}
	for _, p := range d.posts {
		distinct[p] = true
	}
	if len(distinct) != 1080 {
		t.Fatalf("%d distinct posts of 1080", len(distinct))
	}

	code, out, _ = runIt(t, "-url", srv.URL, "-discord", hook.URL)
	if code != 0 {
		t.Fatalf("second run exited %d", code)
	}
	for _, want := range []string{
		"feed: 1200 articles, 1200 decided before, 0 new",
		"rejected 0 (kept 30 days), claimed 0 to announce (kept 90 days)",
		"announced 0 new articles to Discord",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("second run: %q missing from\n%s", want, out)
		}
	}
	if d.count() != 1080 {
		t.Fatalf("the second run posted %d", d.count()-1080)
	}

	// The decisions expire on the namespaces' schedules.
	c := idem.New(srv.URL)
	for _, tc := range []struct {
		ns, url string
		ttl     time.Duration
	}{
		{"notified_articles", "https://news.example.com/2026/11/article-0001", 90 * 24 * time.Hour},
		{"rejected_articles", "https://news.example.com/2026/11/article-0010", 30 * 24 * time.Hour},
	} {
		rec, err := c.Claims.Get(context.Background(), tc.ns, idem.Key(tc.url))
		if err != nil || rec == nil || rec.ExpiresAt == nil || rec.ExpiresAt.Sub(rec.CreatedAt) != tc.ttl {
			t.Fatalf("%s %s: %+v %v", tc.ns, tc.url, rec, err)
		}
	}
}

// A post that fails gives its claim back: the next run announces it, and only it.
func TestFailedPostIsRetriedNextRun(t *testing.T) {
	srv := startIdem(t, true)
	feed := filepath.Join(t.TempDir(), "feed.txt")
	var lines []string
	for i := 1; i <= 12; i++ {
		lines = append(lines, fmt.Sprintf("https://blog.example.org/post-%d", i))
	}
	lines = append(lines, "", "# a comment", lines[0]) // blank lines, comments and repeats are skipped
	if err := os.WriteFile(feed, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &discord{failing: []string{"post-3", "post-7"}}
	hook := httptest.NewServer(d)
	defer hook.Close()

	code, out, _ := runIt(t, "-url", srv.URL, "-discord", hook.URL, "-feed", feed)
	if code != 0 || !strings.Contains(out, "feed: 12 articles, 0 decided before, 12 new") ||
		!strings.Contains(out, "rejected 1 ") || !strings.Contains(out, "announced 9 new articles to Discord; 2 posts failed") {
		t.Fatalf("first run: %d\n%s", code, out)
	}
	d.mu.Lock()
	d.failing = nil
	d.mu.Unlock()
	code, out, _ = runIt(t, "-url", srv.URL, "-discord", hook.URL, "-feed", feed)
	if code != 0 || !strings.Contains(out, "feed: 12 articles, 10 decided before, 2 new") || !strings.Contains(out, "announced 2 new articles to Discord\n") {
		t.Fatalf("second run: %d\n%s", code, out)
	}
	if d.count() != 11 || !strings.HasSuffix(d.posts[9], "post-3") || !strings.HasSuffix(d.posts[10], "post-7") {
		t.Fatalf("posts: %q", d.posts)
	}
	code, out, _ = runIt(t, "-url", srv.URL, "-discord", hook.URL, "-feed", feed)
	if code != 0 || !strings.Contains(out, "announced 0 new articles") || d.count() != 11 {
		t.Fatalf("third run: %d\n%s", code, out)
	}
}

// Without Discord the new articles are listed on stdout.
func TestStdout(t *testing.T) {
	srv := startIdem(t, true)
	code, out, _ := runIt(t, "-url", srv.URL)
	if code != 0 || !strings.Contains(out, "announced 1080 new articles to stdout") ||
		!strings.Contains(out, "  new: https://news.example.com/2026/11/article-0001\n") || !strings.Contains(out, "… and 1075 more") {
		t.Fatalf("%d\n%s", code, out)
	}
}

// The example says plainly what is missing: idem's config, or idem itself.
func TestSaysWhatIsMissing(t *testing.T) {
	srv := startIdem(t, false)
	code, _, errOut := runIt(t, "-url", srv.URL)
	if code != 2 || !strings.Contains(errOut, "runs without this example's config") || !strings.Contains(errOut, "--config examples/articles/idem.toml") {
		t.Fatalf("without the config: %d %s", code, errOut)
	}
	url := srv.URL
	_ = srv.Close()
	code, _, errOut = runIt(t, "-url", url)
	if code != 2 || !strings.Contains(errOut, "idem is not reachable at "+url) {
		t.Fatalf("without idem: %d %s", code, errOut)
	}
}
