<?php

declare(strict_types=1);

namespace Idem\Tests\Support;

/**
 * A real `idem serve` on a free port with a temporary data dir, stopped when the test run ends.
 *
 * The binary is IDEM_BIN (or IDEM_TEST_BIN), else <repo>/target/debug/idem (cargo build -p
 * idem-server). A missing binary fails the tests that need it, loudly.
 */
final class IdemServer
{
    /** @var array<string, self> one server per config, shared by the run's tests */
    private static array $shared = [];

    public readonly string $url;
    public readonly string $dir;
    /** @var resource|null */
    private $process = null;

    private function __construct(private readonly ?string $config)
    {
        $this->dir = sys_get_temp_dir() . '/idem-php-' . bin2hex(random_bytes(6));
        mkdir($this->dir, 0700, true);
        $this->url = $this->start();
    }

    /** A server with this config (null: none), started on first use and shared afterwards. */
    public static function shared(?string $config = null): self
    {
        $key = $config ?? '';
        if (!isset(self::$shared[$key])) {
            self::$shared[$key] = new self($config);
            if (count(self::$shared) === 1) {
                register_shutdown_function([self::class, 'stopAll']);
            }
        }
        return self::$shared[$key];
    }

    public static function stopAll(): void
    {
        foreach (self::$shared as $server) {
            $server->stop();
            self::removeTree($server->dir);
        }
        self::$shared = [];
    }

    /** Deletes a temporary folder of the tests and everything in it. */
    public static function removeTree(string $dir): void
    {
        if (!is_dir($dir) || is_link($dir)) {
            @unlink($dir);
            return;
        }
        foreach (array_diff((array) scandir($dir), ['.', '..']) as $entry) {
            self::removeTree("$dir/$entry");
        }
        @rmdir($dir);
    }

    public static function bin(): string
    {
        $bin = getenv('IDEM_BIN') ?: getenv('IDEM_TEST_BIN') ?: dirname(__DIR__, 4) . '/target/debug/idem';
        if (!is_file($bin)) {
            throw new \RuntimeException("the idem binary is missing at $bin: build it (cargo build -p idem-server) or point IDEM_BIN at one");
        }
        return $bin;
    }

    public static function freePort(): int
    {
        $socket = stream_socket_server('tcp://127.0.0.1:0');
        $name = stream_socket_get_name($socket, false);
        fclose($socket);
        return (int) substr((string) $name, strrpos((string) $name, ':') + 1);
    }

    /** The environment for child processes: without the run's IDEM_* settings. */
    public static function childEnv(array $extra = []): array
    {
        $env = [];
        foreach (getenv() as $name => $value) {
            if (!str_starts_with($name, 'IDEM_')) {
                $env[$name] = $value;
            }
        }
        return $extra + $env;
    }

    private function start(): string
    {
        $bin = self::bin();
        $log = '';
        for ($try = 0; $try < 3; $try++) { // a free port can be taken between probe and bind
            $port = self::freePort();
            $args = [$bin, 'serve', '--listen', "127.0.0.1:$port", '--data-dir', "$this->dir/data"];
            if ($this->config !== null) {
                file_put_contents("$this->dir/idem.toml", $this->config);
                array_push($args, '--config', "$this->dir/idem.toml");
            }
            $logFile = "$this->dir/idem.log";
            $this->process = proc_open($args, [0 => ['file', '/dev/null', 'r'], 1 => ['file', $logFile, 'a'], 2 => ['file', $logFile, 'a']], $pipes, $this->dir, self::childEnv());
            $scheme = $this->config !== null && str_contains($this->config, "[tls]") ? 'https' : 'http';
            $url = "$scheme://127.0.0.1:$port";
            if (self::waitHealthy($url, $this->process)) {
                return $url;
            }
            $log = (string) @file_get_contents($logFile);
            $this->stop();
        }
        self::removeTree($this->dir);
        throw new \RuntimeException("idem serve did not become healthy:\n" . substr($log, -2000));
    }

    /** @param resource $process */
    public static function waitHealthy(string $url, $process, float $timeout = 30.0, string $path = '/healthz'): bool
    {
        $deadline = microtime(true) + $timeout;
        // Polling only: a test's own TLS certificate is checked by the test, not here.
        $context = stream_context_create(['http' => ['timeout' => 1.0, 'ignore_errors' => true], 'ssl' => ['verify_peer' => false, 'verify_peer_name' => false]]);
        while (microtime(true) < $deadline) {
            if (!proc_get_status($process)['running']) {
                return false;
            }
            $body = @file_get_contents($url . $path, false, $context);
            if ($body !== false && isset($http_response_header[0]) && str_contains($http_response_header[0], ' 200')) {
                return true;
            }
            usleep(20_000); // a polling interval, not a fixed wait
        }
        return false;
    }

    public function log(): string
    {
        return (string) @file_get_contents("$this->dir/idem.log");
    }

    public function stop(): void
    {
        if (is_resource($this->process)) {
            proc_terminate($this->process);
            $deadline = microtime(true) + 10;
            while (proc_get_status($this->process)['running'] && microtime(true) < $deadline) {
                usleep(20_000);
            }
            if (proc_get_status($this->process)['running']) {
                proc_terminate($this->process, 9);
            }
            proc_close($this->process);
        }
        $this->process = null;
    }
}
