<?php

// The router of FakeServer (tests/Support/FakeServer.php) under `php -S`: records each request and
// answers it with the next queued answer.

declare(strict_types=1);

$dir = getenv('FAKE_DIR');
$path = $_SERVER['REQUEST_URI'];
if ($path === '/__ready') {
    echo 'ok';
    return true;
}
$body = file_get_contents('php://input');
$headers = array_change_key_case(getallheaders(), CASE_LOWER);
file_put_contents("$dir/requests.jsonl", json_encode(['method' => $_SERVER['REQUEST_METHOD'], 'path' => $path, 'headers' => $headers, 'body' => $body]) . "\n", FILE_APPEND | LOCK_EX);

$queue = json_decode((string) file_get_contents("$dir/queue.json"), true) ?: [];
$answer = array_shift($queue) ?? ['status' => 500, 'body' => ['type' => 'about:blank', 'title' => 'nothing queued']];
file_put_contents("$dir/queue.json", json_encode($queue));

if (!empty($answer['forward'])) {
    $upstream = getenv('FAKE_UPSTREAM');
    $send = [];
    foreach (['content-type', 'authorization', 'accept'] as $name) {
        if (isset($headers[$name])) {
            $send[] = "$name: {$headers[$name]}";
        }
    }
    $context = stream_context_create(['http' => ['method' => $_SERVER['REQUEST_METHOD'], 'header' => implode("\r\n", $send), 'content' => $body, 'ignore_errors' => true, 'timeout' => 10]]);
    $got = file_get_contents($upstream . $path, false, $context);
    preg_match('#^HTTP/\S+ (\d{3})#', $http_response_header[0], $m);
    $forwarded = ['status' => (int) $m[1], 'headers' => ['Content-Type' => 'application/json'], 'body' => (string) $got];
    $answer = $answer['instead'] ?? $forwarded;
}

if (isset($answer['sleep'])) {
    usleep((int) ($answer['sleep'] * 1e6));
}
http_response_code($answer['status'] ?? 200);
$out = $answer['body'] ?? '';
$isJson = is_array($out);
foreach ($answer['headers'] ?? [] as $name => $value) {
    header("$name: $value");
}
if ($isJson && !isset($answer['headers']['Content-Type'])) {
    header('Content-Type: ' . (($answer['status'] ?? 200) >= 400 ? 'application/problem+json' : 'application/json'));
}
echo $isJson ? json_encode($out) : $out;
return true;
