<?php
// Seed 003's handler in plain PHP 8.2 on idem's PHP client (no Composer): idem delivers each
// partner event here, signed with Standard Webhooks; Idem\verifyWebhook() checks the signature
// (several during a secret rotation, the timestamp within 5 minutes, in constant time), this script
// processes each event once (idem delivers at least once, so the same webhook-id can come again)
// and answers 204.
//
// Run:  IDEM_SIGNING_SECRET=whsec_… php -S 127.0.0.1:9000 handler.php
//       (the secret is the source's signing_secret in idem.toml; handler_url = "http://127.0.0.1:9000/handle").
//       `idem secret new` makes a secret. An exported IDEM_SIGNING_SECRET does not bother idem: it
//       reads only IDEM_ variables named for a config key, and ignores this one with a warning.
//
// Routes:
//   POST /handle   an event from idem: 401 on a bad signature (nothing runs), else 204
//   POST /results  idem's signed result webhook (receipt.completed / receipt.dead): 204
//   GET  /stats    what this handler did, as JSON (for the tests and for you)
//
// State lives in IDEM_HANDLER_STATE_DIR (default: a folder in the system's temp dir).

declare(strict_types=1);

// The PHP client (clients/php), without Composer. With Composer: `composer require idem/client`
// (a path or VCS repository, see clients/php/README.md) and vendor/autoload.php instead.
require __DIR__ . '/../../../clients/php/autoload.php';

function state_dir(): string
{
    $dir = getenv('IDEM_HANDLER_STATE_DIR') ?: sys_get_temp_dir() . '/idem-partner-php';
    if (!is_dir($dir . '/done') && !@mkdir($dir . '/done', 0700, true) && !is_dir($dir . '/done')) {
        throw new RuntimeException("cannot create the state directory $dir");
    }
    return $dir;
}

/** Appends one JSON line to a log file of the state dir. */
function record(string $file, array $line): void
{
    file_put_contents(state_dir() . "/$file", json_encode($line) . "\n", FILE_APPEND | LOCK_EX);
}

function count_lines(string $file): int
{
    $path = state_dir() . "/$file";
    return is_file($path) ? count(file($path, FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES)) : 0;
}

/** The work itself: here it appends the event to processed.jsonl; yours books the order. */
function process_event(string $webhookId, array $event, int $attempt): void
{
    record('processed.jsonl', ['webhook_id' => $webhookId, 'event' => $event, 'attempt' => $attempt]);
}

/**
 * Runs $work once per webhook-id; returns false for a duplicate. A file-backed set under an
 * exclusive lock is enough for this example (php -S on one machine). A real app inserts the
 * webhook-id into a table with a unique index on it in the same database transaction as the work
 * (in Laravel, DB::transaction() around ProcessedWebhook::create(['id' => $id]) and the work), so
 * that the mark and the work commit or roll back together; or it uses idem's Operations API
 * through the client: $idem->operations->run('partner-events', key: $webhookId, fn: $work).
 */
function once(string $webhookId, callable $work): bool
{
    $dir = state_dir();
    $lock = fopen("$dir/lock", 'c');
    flock($lock, LOCK_EX);
    try {
        $mark = "$dir/done/" . hash('sha256', $webhookId);
        if (file_exists($mark)) {
            return false;
        }
        $work();              // throws → not marked: idem's next attempt runs it again
        touch($mark);
        return true;
    } finally {
        flock($lock, LOCK_UN);
        fclose($lock);
    }
}

function answer(int $status, ?array $json = null): void
{
    http_response_code($status);
    if ($json !== null && $status !== 204) { // a 204 must have no body
        header('Content-Type: application/json');
        echo json_encode($json);
    }
}

$method = $_SERVER['REQUEST_METHOD'];
$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);

if ($method === 'GET' && $path === '/stats') {
    $processed = [];
    $log = state_dir() . '/processed.jsonl';
    foreach (is_file($log) ? file($log, FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES) : [] as $line) {
        $processed[] = json_decode($line, true)['webhook_id'];
    }
    answer(200, [
        'processed' => $processed,
        'duplicates' => count_lines('duplicates.jsonl'),
        'bad_signatures' => count_lines('bad_signatures.jsonl'),
        'results' => count_lines('results.jsonl'),
    ]);
    return;
}

if ($method !== 'POST' || ($path !== '/handle' && $path !== '/results')) {
    answer(404, ['error' => 'POST /handle or /results, GET /stats']);
    return;
}

$secret = getenv('IDEM_SIGNING_SECRET') ?: '';
$body = file_get_contents('php://input');   // the raw body, exactly as signed
$id = $_SERVER['HTTP_WEBHOOK_ID'] ?? '';
try {
    $event = Idem\verifyWebhook($secret, getallheaders(), $body);
} catch (Idem\WebhookVerificationException $e) {
    record('bad_signatures.jsonl', ['webhook_id' => $id, 'why' => $e->getMessage()]);
    answer(401, ['error' => 'bad signature']);
    return;
} catch (InvalidArgumentException $e) {
    error_log('IDEM_SIGNING_SECRET is not set or is not whsec_ + base64: refusing every delivery');
    answer(500, ['error' => 'the handler has no signing secret']); // idem retries; nothing runs
    return;
}

if (!is_array($event)) {
    answer(400, ['error' => 'the event is not a JSON object']);
    return;
}

if ($path === '/results') {
    record('results.jsonl', $event); // receipt.completed or receipt.dead
    answer(204);
    return;
}

$attempt = (int) ($_SERVER['HTTP_IDEM_ATTEMPT'] ?? 1);
if (!once($id, fn () => process_event($id, $event, $attempt))) {
    record('duplicates.jsonl', ['webhook_id' => $id, 'attempt' => $attempt]);
}
answer(204);
