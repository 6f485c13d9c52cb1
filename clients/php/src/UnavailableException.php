<?php

declare(strict_types=1);

namespace Idem;

/**
 * 503, after the client's own retries: idem's store cannot be reached or written. $type says which:
 * IdemException::STORE_UNAVAILABLE (nothing was changed; retry later) or
 * IdemException::OUTCOME_UNKNOWN (the write may or may not have been made). After the latter, ask
 * again with the same clientToken to learn which: a claim that was made answers claimed: true, a
 * begin that took the key its lease.
 */
class UnavailableException extends IdemException
{
}
