<?php

// The test run's bootstrap: the client through its Composer-less autoloader (as a team without
// Composer uses it), and the test support (a real idem, a fake HTTP server).

declare(strict_types=1);

require dirname(__DIR__) . '/autoload.php';
require __DIR__ . '/Support/IdemServer.php';
require __DIR__ . '/Support/FakeServer.php';
require __DIR__ . '/Support/FakeTransport.php';
require __DIR__ . '/Support/IdemTestCase.php';
