<?php
// phpredis (the `redis` extension: Debian's php-redis), the Redis client of PHP idempotency code and
// of Laravel's and Symfony's Redis stores, against idem's Redis protocol (`[resp]`): a real
// `idem serve` ($IDEM_TEST_BIN, default <repo>/target/debug/idem) on a temp data dir and free
// ports, open (no tokens, loopback) and with tokens. phpredis speaks RESP2 and sends nothing when it
// connects. A plain PHP CLI script: `php tests/redis/php/phpredis_test.php`; it prints one line per
// check, then "N passed, M failed", and exits non-zero when any failed.

declare(strict_types=1);

const WRITER = 'writer-s3cret';
const READER = 'reader-s3cret';

if (!extension_loaded('redis')) {
    fwrite(STDERR, "phpredis is not loaded (Debian: apt-get install php-redis)\n");
    exit(2);
}

final class Failed extends Exception
{
}

function check(bool $ok, string $what): void
{
    if (!$ok) {
        throw new Failed($what);
    }
}

function same($expected, $actual, string $what): void
{
    check($expected === $actual, sprintf('%s: expected %s, got %s', $what, var_export($expected, true), var_export($actual, true)));
}

/** A RedisException (its message matching $pattern) from $f, or a failure. */
function throws(string $pattern, callable $f, string $what): void
{
    try {
        $got = $f();
    } catch (RedisException $e) {
        check((bool) preg_match($pattern, $e->getMessage()), "$what: RedisException '{$e->getMessage()}' does not match $pattern");
        return;
    }
    throw new Failed("$what: expected a RedisException matching $pattern, got " . var_export($got, true));
}

/** phpredis answers false to a command the server refused, and keeps the error for getLastError(). */
function refused(Redis $r, string $pattern, $reply, string $what): void
{
    same(false, $reply, "$what: the reply");
    $error = (string) $r->getLastError();
    check((bool) preg_match($pattern, $error), "$what: getLastError() '$error' does not match $pattern");
    $r->clearLastError();
}

function free_port(): int
{
    $socket = stream_socket_server('tcp://127.0.0.1:0', $errno, $error);
    if ($socket === false) {
        throw new RuntimeException("no free port: $error");
    }
    $name = stream_socket_get_name($socket, false);
    fclose($socket);
    return (int) substr($name, strrpos($name, ':') + 1);
}

/** A running `idem serve`: its RESP port, and how to stop it. */
final class Idem
{
    /** @var resource */
    private $process;

    public function __construct(public int $port, private string $dir, $process)
    {
        $this->process = $process;
    }

    public static function start(bool $tokens): self
    {
        $binary = getenv('IDEM_TEST_BIN') ?: dirname(__DIR__, 3) . '/target/debug/idem';
        if (!is_executable($binary)) {
            throw new RuntimeException("no idem binary at $binary (build it, or set IDEM_TEST_BIN)");
        }
        $dir = sys_get_temp_dir() . '/idem-phpredis-' . bin2hex(random_bytes(6));
        mkdir($dir);
        $api = free_port();
        $port = free_port();
        $config = "listen = \"127.0.0.1:$api\"\ndata_dir = \"$dir/data\"\n";
        // scripts/test.sh runs this file twice: on the embedded store, then on PostgreSQL.
        $database = getenv('IDEM_TEST_RESP_DATABASE_URL');
        if ($database) {
            $config .= "\n[store]\ntype = \"postgres\"\nurl = \"$database\"\n";
        }
        $config .= "\n[resp]\nlisten = \"127.0.0.1:$port\"\n";
        if ($tokens) {
            $config .= "\n[[auth.token]]\nname = \"writer\"\ntoken = \"" . WRITER . "\"\ncan = \"write\"\n";
            $config .= "\n[[auth.token]]\nname = \"reader\"\ntoken = \"" . READER . "\"\ncan = \"read\"\n";
        }
        file_put_contents("$dir/idem.toml", $config);
        $log = ['file', "$dir/idem.log", 'w'];
        // An argument list, not a shell line: proc_terminate() signals idem itself.
        $process = proc_open([$binary, 'serve', '--config', "$dir/idem.toml"], [0 => ['file', '/dev/null', 'r'], 1 => $log, 2 => $log], $pipes);
        if ($process === false) {
            throw new RuntimeException("could not start $binary");
        }
        $idem = new self($port, $dir, $process);
        $deadline = microtime(true) + 30;
        while (true) {
            if (!proc_get_status($process)['running']) {
                throw new RuntimeException("idem exited: " . file_get_contents("$dir/idem.log"));
            }
            $socket = @fsockopen('127.0.0.1', $port, $errno, $error, 0.2);
            if ($socket !== false) {
                fclose($socket);
                return $idem;
            }
            if (microtime(true) > $deadline) {
                $idem->stop();
                throw new RuntimeException("idem's [resp] did not listen within 30 s: " . file_get_contents("$dir/idem.log"));
            }
            usleep(50_000);
        }
    }

    public function client(): Redis
    {
        $r = new Redis();
        check($r->connect('127.0.0.1', $this->port, 5.0) === true, "connect to 127.0.0.1:{$this->port}");
        return $r;
    }

    public function stop(): void
    {
        if (proc_get_status($this->process)['running']) {
            proc_terminate($this->process, 15);
        }
        proc_close($this->process);
        exec('rm -rf ' . escapeshellarg($this->dir));
    }
}

function unique(string $prefix): string
{
    static $n = 0;
    return sprintf('%s:%d:%d', $prefix, hrtime(true), $n++);
}

// ---------------------------------------------------------------------------------------------

$checks = [];

$checks['SET NX EX, again, GET, TTL, EXISTS, MGET, DEL'] = function (Idem $open): void {
    $r = $open->client();
    same(true, $r->ping(), 'PING');
    $key = unique('order');
    same(true, $r->set($key, '{"status":"INPROGRESS"}', ['nx', 'ex' => 60]), 'SET NX EX');
    same(false, $r->set($key, 'again', ['nx', 'ex' => 60]), 'SET NX EX again');
    same('{"status":"INPROGRESS"}', $r->get($key), 'GET');
    $ttl = $r->ttl($key);
    check($ttl === 59 || $ttl === 60, 'TTL: ' . var_export($ttl, true));
    $pttl = $r->pttl($key);
    check(is_int($pttl) && $pttl > 58_000 && $pttl <= 60_000, 'PTTL: ' . var_export($pttl, true));
    same(1, $r->exists($key, unique('absent')), 'EXISTS');
    same(['{"status":"INPROGRESS"}', false], $r->mget([$key, unique('absent')]), 'MGET (phpredis: false for nil)');
    same(1, $r->del($key), 'DEL');
    same(false, $r->get($key), 'GET after DEL (phpredis: false for nil)');
    same(-2, $r->ttl($key), 'TTL after DEL');
    same(0, $r->del($key), 'DEL again');
};

$checks['SETNX, PX, UNLINK'] = function (Idem $open): void {
    $r = $open->client();
    $key = unique('setnx');
    same(true, $r->setnx($key, 'first'), 'SETNX');
    same(false, $r->setnx($key, 'second'), 'SETNX again');
    same('first', $r->get($key), 'GET');
    same(-1, $r->ttl($key), 'TTL of a key set without expiry');
    same(1, $r->unlink($key), 'UNLINK');
    $px = unique('px');
    same(true, $r->set($px, 'v', ['nx', 'px' => 30_000]), 'SET NX PX');
    $ttl = $r->ttl($px);
    check($ttl === 29 || $ttl === 30, 'TTL after PX 30000: ' . var_export($ttl, true));
};

$checks['a binary value with "\0\r\n\xff" round-trips'] = function (Idem $open): void {
    $r = $open->client();
    $key = unique('binary');
    $value = "\0\r\n\xff\xfe end";
    same(true, $r->set($key, $value, ['nx', 'ex' => 60]), 'SET NX EX of binary');
    same($value, $r->get($key), 'GET of binary');
    same(false, $r->get(unique('absent')), 'GET of an absent key');
    $empty = unique('empty');
    same(true, $r->set($empty, '', ['nx']), 'SET NX of ""');
    same('', $r->get($empty), 'GET of ""');
};

$checks['a pipeline: SET NX, GET, SET NX again, DEL'] = function (Idem $open): void {
    $r = $open->client();
    $key = unique('pipeline');
    $replies = $r->multi(Redis::PIPELINE)
        ->set($key, 'first', ['nx'])
        ->get($key)
        ->set($key, 'second', ['nx'])
        ->del($key)
        ->exec();
    same([true, 'first', false, 1], $replies, 'the pipeline\'s replies');
};

$checks['plain SET, SETEX, EXPIRE, PERSIST as Laravel\'s cache sends them'] = function (Idem $open): void {
    $r = $open->client();
    $key = unique('cache');
    same(true, $r->setex($key, 60, 'v1'), 'SETEX (Cache::put)');
    check($r->ttl($key) >= 59, 'SETEX set the TTL');
    same(true, $r->set($key, 'v2'), 'SET (Cache::forever)');
    same(-1, $r->ttl($key), 'a plain SET: no expiry');
    same(true, $r->expire($key, 30), 'EXPIRE (Cache::touch)');
    same(true, $r->persist($key), 'PERSIST');
    same('v2', $r->get($key), 'the value through it all');
    same(1, $r->del($key), 'DEL (Cache::forget)');
};

$checks['Laravel\'s lock: acquire, refresh and release by the owner only; Cache::add'] = function (Idem $open): void {
    $r = $open->client();
    $release = "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\",KEYS[1])\nelse\n    return 0\nend";
    $refresh = "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    if tonumber(ARGV[2]) > 0 then\n        return redis.call(\"expire\",KEYS[1],ARGV[2])\n    end\n\n    redis.call(\"persist\",KEYS[1])\n\n    return 1\nelse\n    return 0\nend";
    $add = "return redis.call('exists',KEYS[1])<1 and redis.call('setex',KEYS[1],ARGV[2],ARGV[1])";
    $lock = unique('laravel_cache_lock');
    // RedisLock::acquire, as Laravel's PhpRedisConnection sends it.
    same(true, $r->set($lock, 'owner-a', ['EX' => 10, 'NX']), 'acquire');
    same(false, $r->set($lock, 'owner-b', ['EX' => 10, 'NX']), 'acquired already');
    same(0, $r->eval($release, [$lock, 'owner-b'], 1), 'release by another owner');
    same(1, $r->eval($refresh, [$lock, 'owner-a', 60], 1), 'refresh by the owner');
    check($r->ttl($lock) >= 59, 'refreshed');
    same(1, $r->eval($release, [$lock, 'owner-a'], 1), 'release by the owner');
    same(0, $r->exists($lock), 'released');
    $key = unique('laravel_cache');
    same(true, $r->eval($add, [$key, 'v1', 60], 1), 'Cache::add of a new key');
    same(false, $r->eval($add, [$key, 'v2', 60], 1), 'Cache::add of a key that exists');
    same('v1', $r->get($key), 'the first value');
};

$checks['what idem does not run is refused, and nothing changes'] = function (Idem $open): void {
    $r = $open->client();
    $key = unique('refused');
    same(true, $r->set($key, 'first', ['nx']), 'SET NX');
    refused($r, "/'incr' is not one of them/", $r->incr($key), 'INCR');
    refused($r, "/runs only the scripts of the libraries it supports/", $r->eval('return 1'), 'another script');
    same('first', $r->get($key), 'the value after all that');
    same(false, $r->select(1), 'SELECT 1');
    same(true, $r->select(0), 'SELECT 0');
};

$checks['INFO, ECHO'] = function (Idem $open): void {
    $r = $open->client();
    $info = $r->info();
    check(is_array($info) && isset($info['redis_version']), 'INFO parsed by phpredis: ' . var_export($info, true));
    same('hello', $r->echo('hello'), 'ECHO');
};

$checks['tokens: auth() with the writer\'s token, a wrong one throws WRONGPASS, none NOAUTH'] = function (Idem $open, Idem $tokens): void {
    $r = $tokens->client();
    throws('/^NOAUTH/', fn () => $r->get(unique('k')), 'GET before AUTH');
    throws('/^WRONGPASS/', fn () => $r->auth('wrong'), 'auth() with a wrong password');
    throws('/^WRONGPASS/', fn () => $r->auth(['default', 'wrong']), 'auth([default, wrong])');
    same(true, $r->auth(WRITER), 'auth() with the writer\'s token');
    $key = unique('authed');
    same(true, $r->set($key, 'v', ['nx', 'ex' => 60]), 'SET NX EX as the writer');
    same(false, $r->set($key, 'w', ['nx', 'ex' => 60]), 'SET NX EX again');
    same('v', $r->get($key), 'GET as the writer');
    same(true, $r->set($key, 'replaced'), 'a plain SET as the writer');
    same(true, $r->set($key, 'v'), 'and back');

    $reader = $tokens->client();
    same(true, $reader->auth(['default', READER]), 'auth([default, reader\'s token])');
    same('v', $reader->get($key), 'GET as the reader');
    throws('/^NOPERM/', fn () => $reader->set(unique('nope'), 'v', ['nx']), 'SET NX as the reader');

    same(1, $r->del($key), 'DEL as the writer');
};

$checks['tokens: connect() with an auth option'] = function (Idem $open, Idem $tokens): void {
    $r = new Redis();
    same(true, $r->connect('127.0.0.1', $tokens->port, 5.0, null, 0, 0, ['auth' => [WRITER]]), 'connect with auth => [writer]');
    same(true, $r->set(unique('connect-auth'), 'v', ['nx']), 'SET NX');
    $wrong = new Redis();
    // phpredis sends AUTH as part of connect() and answers false when it is refused.
    same(false, @$wrong->connect('127.0.0.1', $tokens->port, 5.0, null, 0, 0, ['auth' => ['wrong']]), 'connect with a wrong auth');
};

// ---------------------------------------------------------------------------------------------

$passed = 0;
$failed = 0;
$open = $tokens = null;
try {
    $open = Idem::start(false);
    $tokens = Idem::start(true);
    printf("phpredis %s against %s\n", phpversion('redis'), getenv('IDEM_TEST_BIN') ?: 'target/debug/idem');
    foreach ($checks as $name => $run) {
        try {
            $run($open, $tokens);
            $passed++;
            echo "ok - $name\n";
        } catch (Throwable $e) {
            $failed++;
            $where = $e instanceof Failed ? '' : sprintf(' (%s at line %d)', get_class($e), $e->getLine());
            echo "FAILED - $name: {$e->getMessage()}$where\n";
        }
    }
} catch (Throwable $e) {
    $failed++;
    echo "FAILED - starting idem: {$e->getMessage()}\n";
} finally {
    $open?->stop();
    $tokens?->stop();
}

// The closing line that scripts/test.sh sums (as pytest's "N passed, M failed").
echo "$passed passed, $failed failed\n";
exit($failed === 0 ? 0 : 1);
