<?php

// The test run's bootstrap: the client through its Composer-less autoloader (as a team without
// Composer uses it), and the test support (a real idem, a fake HTTP server).

declare(strict_types=1);

// The client reads IDEM_URL and IDEM_TOKEN when none is given: the tests give theirs, and a
// developer's own settings must not reach them.
putenv('IDEM_URL');
putenv('IDEM_TOKEN');

require dirname(__DIR__) . '/autoload.php';
require __DIR__ . '/Support/IdemServer.php';
require __DIR__ . '/Support/FakeServer.php';
require __DIR__ . '/Support/FakeTransport.php';
require __DIR__ . '/Support/IdemTestCase.php';
