<?php

declare(strict_types=1);

namespace Idem;

/**
 * 503: idem's store cannot be written right now (store-unavailable: nothing was changed), or its
 * answer was lost (outcome-unknown: the change may have been made), after the client's retries. A
 * claim or a begin retried with the same clientToken learns which.
 */
class UnavailableException extends IdemException
{
}
