<?php

declare(strict_types=1);

namespace Idem;

/**
 * 409 urn:idem:problem:in-progress: another caller holds the operation's key and is still running it.
 * retryAfter says when to ask again.
 */
class InProgressException extends IdemException
{
}
