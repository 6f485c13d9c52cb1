<?php

declare(strict_types=1);

namespace Idem\Tests\Support;

use Idem\Client;
use PHPUnit\Framework\TestCase;

/** Tests against a real idem: a shared server, a client for it, and a namespace per test. */
abstract class IdemTestCase extends TestCase
{
    /** A server requiring the bearer token `t0k` (admin), or `v13w` (read only). */
    protected const AUTH_CONFIG = "[auth]\ntokens = [\"t0k\"]\n[[auth.token]]\nname = \"viewer\"\ntoken = \"v13w\"\ncan = \"read\"\n";

    protected static function server(?string $config = null): IdemServer
    {
        return IdemServer::shared($config);
    }

    protected static function client(?string $token = null, ?string $config = null, mixed ...$options): Client
    {
        return new Client(...($options + ['url' => self::server($config)->url, 'token' => $token, 'timeout' => 10.0]));
    }

    /** A namespace of this test's own. */
    protected static function ns(): string
    {
        return 'php-' . bin2hex(random_bytes(8));
    }
}
