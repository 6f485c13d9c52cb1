<?php

// The router of a FakeServer made with router: 'proxy.php' (tests/Support/FakeServer.php), under
// `php -S`: a proxy in front of a real idem (FAKE_UPSTREAM) that forwards every request, except
// what plan.json says: 'outage' => [from, to] answers every extend that arrives between those
// seconds after the first begin with 503 store-unavailable and Retry-After: 1 (idem's answer while
// its store is away); 'beginDelay' => seconds holds a begin's answer back. Each request is logged
// to proxy.jsonl: its path, when it arrived (seconds after the first begin) and the status its
// client was answered.

declare(strict_types=1);

$dir = getenv('FAKE_DIR');
$path = $_SERVER['REQUEST_URI'];
if ($path === '/__ready') {
    echo 'ok';
    return true;
}
$now = microtime(true);
$plan = json_decode((string) @file_get_contents("$dir/plan.json"), true) ?: [];
$isBegin = str_ends_with($path, '/begin');
if ($isBegin && !is_file("$dir/began")) {
    file_put_contents("$dir/began", (string) $now);
}
$began = is_file("$dir/began") ? (float) file_get_contents("$dir/began") : $now;
$at = $now - $began;
$body = file_get_contents('php://input');
$headers = array_change_key_case(getallheaders(), CASE_LOWER);

$log = static function (int $status) use ($dir, $path, $at): void {
    file_put_contents("$dir/proxy.jsonl", json_encode(['path' => $path, 'at' => $at, 'status' => $status]) . "\n", FILE_APPEND | LOCK_EX);
};

[$from, $to] = $plan['outage'] ?? [INF, INF];
if (str_ends_with($path, '/extend') && $at >= $from && $at < $to) {
    http_response_code(503);
    header('Content-Type: application/problem+json');
    header('Retry-After: 1');
    echo json_encode(['type' => 'urn:idem:problem:store-unavailable', 'title' => 'Store unavailable', 'status' => 503, 'detail' => 'the store did not answer (test outage)']);
    $log(503);
    return true;
}

$send = [];
foreach (['content-type', 'authorization', 'accept'] as $name) {
    if (isset($headers[$name])) {
        $send[] = "$name: {$headers[$name]}";
    }
}
$context = stream_context_create(['http' => ['method' => $_SERVER['REQUEST_METHOD'], 'header' => implode("\r\n", $send), 'content' => $body, 'ignore_errors' => true, 'timeout' => 30]]);
$got = (string) file_get_contents(getenv('FAKE_UPSTREAM') . $path, false, $context);
preg_match('#^HTTP/\S+ (\d{3})#', $http_response_header[0], $m);
$status = (int) $m[1];
foreach ($http_response_header as $line) {
    if (preg_match('#^(content-type|retry-after):#i', $line)) {
        header($line);
    }
}
if ($isBegin && isset($plan['beginDelay'])) {
    usleep((int) ($plan['beginDelay'] * 1e6));
}
http_response_code($status);
echo $got;
$log($status);
return true;
