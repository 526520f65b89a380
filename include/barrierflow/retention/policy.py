"""Which completed checkpoints retention keeps (the retention policy).

Inputs: the readable completed checkpoints of the current timeline that are not savepoints,
``N = checkpoint.retained`` and ``verification.prefer_verified`` (true when the spec has no
``verification`` section). Savepoints are always kept by the caller, whatever their timeline;
abandoned (discarded-timeline) checkpoints are never kept.

:attr:`RetentionPolicy.NEWEST`, used when ``prefer_verified`` is false
    keep the newest N checkpoints; stored verification results are ignored.

:attr:`RetentionPolicy.PREFER_VERIFIED`
    1. checkpoints whose stored verification failed do not count (``restore --latest-valid``
       skips them);
    2. keep the newest N checkpoints whose stored verification passed (*verified*);
    3. keep the newest N not-yet-verified checkpoints newer than the newest verified one
       (*pending*: the scheduled verification has not reached them; deleting them would
       throw away the freshest restore points);
    4. if fewer than N are kept, add the newest remaining not-yet-verified ones up to N;
    5. failed checkpoints newer than the oldest one kept stay too (uncounted): retention never
       deletes the freshest checkpoints because of a verdict (which may itself be wrong, or
       be evidence an operator still needs); they go once they are older than every kept
       one. If every checkpoint failed, the newest N are kept.
    So at most 2N checkpoints (plus failed ones among them) are kept, and at least
    min(N, number of checkpoints).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence


class RetentionPolicy(enum.StrEnum):
    NEWEST = "newest"
    PREFER_VERIFIED = "prefer-verified"


def choose_retained(
    ids: Sequence[int],
    retained: int,
    policy: RetentionPolicy,
    verdicts: Mapping[int, bool | None] | None = None,
) -> set[int]:
    """The ids to keep among ``ids`` (completed, current timeline, not savepoints).

    ``verdicts`` maps an id to its stored verification result (True passed, False failed,
    None or absent: never verified)."""
    newest_first = sorted(ids, reverse=True)
    if policy is RetentionPolicy.NEWEST:
        return set(newest_first[:retained])
    verdicts = verdicts or {}
    verified = [i for i in newest_first if verdicts.get(i) is True][:retained]  # Step 2.
    unverified = [i for i in newest_first if verdicts.get(i) is None]  # Step 1: failed ones drop out.
    newest_verified = verified[0] if verified else -1
    pending = [i for i in unverified if i > newest_verified][:retained]  # Step 3.
    kept = set(verified) | set(pending)
    for i in unverified:  # Step 4.
        if len(kept) >= retained:
            break
        kept.add(i)
    failed = [i for i in newest_first if verdicts.get(i) is False]
    if not kept:  # Step 5.
        return set(failed[:retained])
    oldest = min(kept)
    return kept | {i for i in failed if i > oldest}
