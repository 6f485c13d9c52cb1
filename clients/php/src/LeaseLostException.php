<?php

declare(strict_types=1);

namespace Idem;

/**
 * 409 urn:idem:problem:lease-lost: the token no longer holds the operation's key (its lease ran out,
 * or it was completed or released already). The result was not stored; the work may have been taken
 * over by another caller.
 */
class LeaseLostException extends IdemException
{
}
