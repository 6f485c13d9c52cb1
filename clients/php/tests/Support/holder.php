<?php

// Another holder of an operation, for OperationsTest: begins the key, says so on stdout, works for
// a while, then completes with a result. php holder.php URL NS KEY SECONDS

declare(strict_types=1);

require dirname(__DIR__, 2) . '/autoload.php';

[, $url, $ns, $key, $seconds] = $argv;
$idem = new Idem\Client($url);
$begun = $idem->operations->begin($ns, key: $key, leaseSeconds: 30);
echo $begun->started ? "started\n" : "not started\n";
fflush(STDOUT);
usleep((int) ((float) $seconds * 1e6));
$idem->operations->complete($ns, $begun->id, (string) $begun->token, ['by' => 'holder', 'pid' => getmypid()]);
