// Seed 002 in Go: an RSS-to-Discord article curator that must announce each article once.
//
// Two namespaces keep what the curator decided, keyed by article URL:
//
//	notified_articles  announced to Discord; forgotten after 90 days
//	rejected_articles  judged off-topic; forgotten after 30 days
//
// (the TTLs are the server's config: examples/articles/idem.toml). Each run checks the feed
// against both namespaces 500 URLs per call (Lookup), judges what is new, and claims it in
// 500-item batches (ClaimBatch) before posting: a claim is atomic, so even two curators running at
// once announce an article once. A post that fails gives its claim back (Delete), so the next run
// tries it again. Store calls are retried with backoff by the client.
//
//	idem serve --config examples/articles/idem.toml
//	cd examples/articles-go && go run .                 # twice: the second run announces nothing
//	go run . -feed urls.txt -discord https://discord.com/api/webhooks/…
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	idem "github.com/idem-dev/idem/clients/go"
)

const (
	batch       = 500
	notifiedNS  = "notified_articles"
	rejectedNS  = "rejected_articles"
	startHint   = "idem serve --config examples/articles/idem.toml"
	defaultFeed = 1200
)

func main() { os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }

// run is the whole program: 0 on success, 1 when something failed, 2 for a usage or setup problem.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("articles-go", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", envOr("IDEM_URL", "http://127.0.0.1:7070"), "the idem server (env IDEM_URL); IDEM_TOKEN is sent as its token")
	feedFile := fs.String("feed", "", "a file of article URLs, one per line (default: a built-in feed of 1,200 articles)")
	discord := fs.String("discord", os.Getenv("DISCORD_WEBHOOK_URL"), "the Discord webhook to announce to (env DISCORD_WEBHOOK_URL); empty: list the new articles on stdout")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	feed, err := loadFeed(*feedFile)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	c := idem.New(*url, idem.WithToken(os.Getenv("IDEM_TOKEN")))
	cur := &curator{idem: c, discord: *discord, http: &http.Client{Timeout: 10 * time.Second}, out: stdout}
	if err := cur.checkServer(ctx, *url); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if err := cur.runOnce(ctx, feed); err != nil {
		fmt.Fprintln(stderr, "articles-go:", err)
		return 1
	}
	return 0
}

type curator struct {
	idem    *idem.Client
	discord string
	http    *http.Client
	out     io.Writer
}

// runOnce is one poll of the feed.
func (c *curator) runOnce(ctx context.Context, feed []string) error {
	decided, err := c.alreadyDecided(ctx, feed)
	if err != nil {
		return err
	}
	var onTopic, offTopic []string
	for _, u := range feed {
		switch {
		case decided[u]:
		case isOnTopic(u):
			onTopic = append(onTopic, u)
		default:
			offTopic = append(offTopic, u)
		}
	}
	fmt.Fprintf(c.out, "feed: %d articles, %d decided before, %d new\n", len(feed), len(decided), len(onTopic)+len(offTopic))

	rejected, err := c.claimAll(ctx, rejectedNS, offTopic, map[string]string{"reason": "off-topic"})
	if err != nil {
		return err
	}
	announced, err := c.claimAll(ctx, notifiedNS, onTopic, map[string]string{"channel": "#news"})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "rejected %d (kept 30 days), claimed %d to announce (kept 90 days)\n", len(rejected), len(announced))

	posted, failed := 0, 0
	for _, u := range announced {
		if err := c.post(ctx, u); err != nil {
			// Give the claim back, so that the next run announces it; if even that fails, the
			// article is skipped until its claim expires.
			if _, derr := c.idem.Claims.Delete(ctx, notifiedNS, idem.Key(u)); derr != nil {
				return fmt.Errorf("posting %s failed (%v) and its claim could not be given back: %w", u, err, derr)
			}
			failed++
			continue
		}
		posted++
	}
	where := "to Discord"
	if c.discord == "" {
		where = "to stdout (no -discord given)"
	}
	fmt.Fprintf(c.out, "announced %d new articles %s", posted, where)
	if failed > 0 {
		fmt.Fprintf(c.out, "; %d posts failed and will be tried on the next run", failed)
	}
	fmt.Fprintln(c.out)
	if c.discord == "" {
		for i, u := range announced {
			if i == 5 {
				fmt.Fprintf(c.out, "  … and %d more\n", len(announced)-5)
				break
			}
			fmt.Fprintln(c.out, "  new:", u)
		}
	}
	return nil
}

// alreadyDecided is the set of feed URLs found in either namespace, looked up 500 per call.
func (c *curator) alreadyDecided(ctx context.Context, urls []string) (map[string]bool, error) {
	seen := map[string]bool{}
	for _, ns := range []string{notifiedNS, rejectedNS} {
		for _, chunk := range chunks(urls, batch) {
			items := make([]idem.Item, len(chunk))
			for i, u := range chunk {
				items[i] = idem.Item{Key: u}
			}
			rs, err := c.idem.Claims.Lookup(ctx, ns, items)
			if err != nil {
				return nil, err
			}
			for i, r := range rs {
				if r.Exists {
					seen[chunk[i]] = true
				}
			}
		}
	}
	return seen, nil
}

// claimAll claims urls in 500-item batches and returns those this run claimed first.
func (c *curator) claimAll(ctx context.Context, ns string, urls []string, data any) ([]string, error) {
	var won []string
	for _, chunk := range chunks(urls, batch) {
		items := make([]idem.Item, len(chunk))
		for i, u := range chunk {
			items[i] = idem.Item{Key: u, Data: data}
		}
		rs, err := c.idem.Claims.ClaimBatch(ctx, ns, items)
		if err != nil {
			return nil, err
		}
		for i, r := range rs {
			if r.Claimed {
				won = append(won, chunk[i])
			}
		}
	}
	return won, nil
}

// post announces one article: to the Discord webhook, or to stdout when there is none.
func (c *curator) post(ctx context.Context, url string) error {
	if c.discord == "" {
		return nil // listed by runOnce
	}
	body, _ := json.Marshal(map[string]string{"content": "New article: " + url})
	req, err := http.NewRequestWithContext(ctx, "POST", c.discord, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := c.http.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("discord answered %d", res.StatusCode)
	}
	return nil
}

// checkServer says plainly what is missing when idem is not reachable, or runs without this
// example's config (the namespaces would have no TTL, and decisions would never be forgotten).
func (c *curator) checkServer(ctx context.Context, url string) error {
	probe := idem.Key(fmt.Sprintf("config-probe-%d", time.Now().UnixNano()))
	for ns, want := range map[string]time.Duration{notifiedNS: 90 * 24 * time.Hour, rejectedNS: 30 * 24 * time.Hour} {
		r, err := c.idem.Claims.Claim(ctx, ns, probe)
		if errors.Is(err, idem.ErrConnection) {
			return fmt.Errorf("idem is not reachable at %s: start it with `%s` (or set IDEM_URL)\n(%v)", url, startHint, err)
		}
		if err != nil {
			return err
		}
		if _, err := c.idem.Claims.Delete(ctx, ns, probe); err != nil {
			return err
		}
		if r.Record.ExpiresAt == nil || r.Record.ExpiresAt.Sub(r.Record.CreatedAt) != want {
			return fmt.Errorf("idem at %s runs without this example's config: the namespace %s has no default_ttl of %s. Start it with `%s` and run this again", url, ns, days(want), startHint)
		}
	}
	return nil
}

// isOnTopic stands for the curator's judgement: every tenth article is off-topic.
func isOnTopic(url string) bool { return !strings.HasSuffix(url, "0") }

func loadFeed(file string) ([]string, error) {
	var urls []string
	if file == "" {
		for i := 1; i <= defaultFeed; i++ {
			urls = append(urls, fmt.Sprintf("https://news.example.com/2026/11/article-%04d", i))
		}
		return urls, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		u := strings.TrimSpace(sc.Text())
		if u != "" && !strings.HasPrefix(u, "#") && !seen[u] {
			seen[u] = true
			urls = append(urls, u)
		}
	}
	return urls, sc.Err()
}

func chunks(items []string, size int) [][]string {
	var out [][]string
	for len(items) > size {
		out = append(out, items[:size])
		items = items[size:]
	}
	if len(items) > 0 {
		out = append(out, items)
	}
	return out
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func days(d time.Duration) string { return fmt.Sprintf("%d days", int(d.Hours()/24)) }
