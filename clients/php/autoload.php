<?php

// The idem client without Composer: require this file, then use Idem\Client.
//
//     require '/path/to/clients/php/autoload.php';
//     $idem = new Idem\Client('http://127.0.0.1:7070');
//
// It registers an autoloader for the Idem\ namespace (PSR-4, src/) and loads the functions
// (Idem\claimId, Idem\verifyWebhook, Idem\signWebhook), which PHP cannot autoload. Requiring it
// twice, or next to Composer's autoloader for idem/client, is harmless.

declare(strict_types=1);

if (PHP_VERSION_ID < 80100) {
    throw new RuntimeException('idem/client needs PHP 8.1 or newer; this is PHP ' . PHP_VERSION);
}

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'Idem\\', 5) !== 0) {
        return;
    }
    $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, 5)) . '.php';
    if (is_file($file)) {
        require $file;
    }
});

require_once __DIR__ . '/src/functions.php';
