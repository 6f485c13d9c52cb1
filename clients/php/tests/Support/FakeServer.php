<?php

declare(strict_types=1);

namespace Idem\Tests\Support;

/**
 * A tiny HTTP server: `php -S` with tests/fake/router.php. Each request is recorded (method, path,
 * headers, body) and answered with the next queued answer: a canned response, or a forward to a
 * real idem ($upstream) whose answer is passed on — or, with 'instead', thrown away and replaced,
 * as when a connection breaks after the server did the work.
 */
final class FakeServer
{
    public readonly string $url;
    public readonly string $dir;
    /** @var resource */
    private $process;

    /** @param string $router the router under tests/fake: router.php, or proxy.php (a proxy in front of $upstream) */
    public function __construct(?string $upstream = null, string $router = 'router.php')
    {
        $this->dir = sys_get_temp_dir() . '/idem-php-fake-' . bin2hex(random_bytes(6));
        mkdir($this->dir, 0700, true);
        file_put_contents("$this->dir/queue.json", '[]');
        $router = dirname(__DIR__) . '/fake/' . $router;
        for ($try = 0; $try < 3; $try++) {
            $port = IdemServer::freePort();
            $env = IdemServer::childEnv(['FAKE_DIR' => $this->dir, 'FAKE_UPSTREAM' => $upstream ?? '']);
            $this->process = proc_open([PHP_BINARY, '-S', "127.0.0.1:$port", $router], [0 => ['file', '/dev/null', 'r'], 1 => ['file', "$this->dir/log", 'a'], 2 => ['file', "$this->dir/log", 'a']], $pipes, $this->dir, $env);
            $this->url = "http://127.0.0.1:$port";
            if (IdemServer::waitHealthy($this->url, $this->process, 10.0, '/__ready')) {
                return;
            }
            proc_terminate($this->process);
            proc_close($this->process);
        }
        throw new \RuntimeException("php -S did not start:\n" . @file_get_contents("$this->dir/log"));
    }

    /**
     * Answers to give, in order. Each is ['status' => 201, 'headers' => [...], 'body' => array|string,
     * 'sleep' => seconds] or ['forward' => true] or ['forward' => true, 'instead' => [answer]].
     */
    public function queue(array ...$answers): void
    {
        file_put_contents("$this->dir/queue.json", json_encode($answers));
        @unlink("$this->dir/requests.jsonl");
    }

    /** @return list<array{method: string, path: string, headers: array<string, string>, body: string}> */
    public function requests(): array
    {
        $file = "$this->dir/requests.jsonl";
        if (!is_file($file)) {
            return [];
        }
        return array_map(static fn (string $line): array => json_decode($line, true), file($file, FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES));
    }

    /**
     * What proxy.php does besides forwarding: ['outage' => [from, to], 'beginDelay' => seconds].
     *
     * @param array<string, mixed> $plan
     */
    public function plan(array $plan): void
    {
        file_put_contents("$this->dir/plan.json", json_encode($plan));
    }

    /**
     * The requests proxy.php saw: their path, when they arrived (seconds after the first begin) and
     * what their client was answered.
     *
     * @return list<array{path: string, at: float, status: int}>
     */
    public function proxied(string $suffix = ''): array
    {
        $file = "$this->dir/proxy.jsonl";
        $lines = is_file($file) ? file($file, FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES) : [];
        $all = array_map(static fn (string $line): array => json_decode($line, true), $lines);
        return array_values(array_filter($all, static fn (array $r): bool => str_ends_with($r['path'], $suffix)));
    }

    public function stop(): void
    {
        if (is_resource($this->process)) {
            proc_terminate($this->process);
            proc_close($this->process);
            IdemServer::removeTree($this->dir);
        }
    }

    public function __destruct()
    {
        $this->stop();
    }
}
