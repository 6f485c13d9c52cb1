<?php

declare(strict_types=1);

namespace Idem;

/**
 * No answer at all: the connection was refused or broke, or the timeout passed, on every attempt.
 * status is 0; type is IdemException::CONNECTION or IdemException::TIMEOUT.
 */
class ConnectionException extends UnavailableException
{
}
