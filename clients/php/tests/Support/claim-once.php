<?php

// One contender of ClaimsTest's race: waits for the start file, claims the key, prints whether it won.
// php claim-once.php URL NS KEY START_FILE

declare(strict_types=1);

require dirname(__DIR__, 2) . '/autoload.php';

[, $url, $ns, $key, $start] = $argv;
while (!file_exists($start)) {
    usleep(1000);
}
$r = (new Idem\Client($url))->claims->claim($ns, key: $key, data: ['pid' => getmypid()]);
echo json_encode(['claimed' => $r->claimed, 'pid' => getmypid(), 'data' => $r->record['data']]), "\n";
