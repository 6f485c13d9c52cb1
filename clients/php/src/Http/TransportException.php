<?php

declare(strict_types=1);

namespace Idem\Http;

/** No answer: the connection was refused, broke, or timed out. The client retries, then throws Idem\ConnectionException. */
final class TransportException extends \RuntimeException
{
    public function __construct(string $message, public readonly bool $timedOut = false)
    {
        parent::__construct($message);
    }
}
