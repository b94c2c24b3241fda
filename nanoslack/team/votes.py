"""Votes (docs/team-rooms.md): a question put to the room, answered by its people with buttons and
by its bots with ``ballot``, reminded once, closed once with the result.

Who a vote waits for is fixed when it opens: the room's people as the edge sees them then
(its human members in the workspace) and the fleet's bots there (``a2a_rooms.members``,
else those the edge knows). Anyone else who answers is counted too. It closes at once
when everyone it waits for has answered; otherwise ``NANOSLACK_VOTE_REMIND`` seconds
after its question went out the room names who has not answered, and
``NANOSLACK_VOTE_CLOSE`` seconds after that reminder it closes, naming the abstainers.

The question, the reminder, the result and the question's closing edit are posted by the
app of the instance that asked (a message is edited by the app that posted it). Each is
claimed by a guarded update of the vote's row in the transaction that queues it, and
its outbox key is unique, so it is posted once whichever process or instance notices.
"""

from __future__ import annotations

from collections.abc import Sequence

from nanoslack import mrkdwn
from nanoslack.logs import get_logger
from nanoslack.store import BallotRow, Store, VoteRow
from nanoslack.store.votes import human_voter

log = get_logger(__name__)


def voter_name(voter: str) -> str:
    """A voter as the room's messages name them: ``<@U…>`` for a person (Slack notifies
    them), ``@eli`` for a bot, as plain text: the same words whichever process, and
    whichever of the fleet's instances it has connected, writes them."""
    if voter.startswith("slack:"):
        return mrkdwn.user(voter.removeprefix("slack:"))
    return f"@{voter}"


def question_text(asker: str, question: str, options: Sequence[str]) -> str:
    """The question's text (what bots read, and Slack's notification; the buttons are the
    edge's): names who asks and the options."""
    return f"🗳️ Vote from {asker}: {question} (options: {', '.join(options)})"


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{round(seconds)} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{round(minutes / 60)} h"


def tally(vote: VoteRow, ballots: Sequence[BallotRow]) -> dict[str, list[str]]:
    """Option → who chose it: people, then the room's bots, as the vote lists them (anyone
    else after them, by name), so a result reads the same however the ballots raced."""
    order = {voter: i for i, voter in enumerate(vote.electorate)}
    counts: dict[str, list[str]] = {option: [] for option in vote.options}
    for ballot in sorted(ballots, key=lambda b: (order.get(b.voter, len(order)), b.voter)):
        counts.setdefault(ballot.choice, []).append(ballot.voter)
    return counts


def silent(vote: VoteRow, ballots: Sequence[BallotRow]) -> list[str]:
    answered = {b.voter for b in ballots}
    return [voter for voter in vote.electorate if voter not in answered]


def result_text(vote: VoteRow, ballots: Sequence[BallotRow]) -> str:
    counts = tally(vote, ballots)
    parts = []
    for option, voters in counts.items():
        who = f" ({', '.join(voter_name(v) for v in voters)})" if voters else ""
        parts.append(f"{option} {len(voters)}{who}")
    best = max((len(v) for v in counts.values()), default=0)
    winners = [option for option, voters in counts.items() if len(voters) == best]
    if not ballots:
        outcome = "no ballots"
    elif len(winners) > 1:
        outcome = f"a tie between {' and '.join(winners)}"
    else:
        outcome = f"*{winners[0]}*"
    abstained = silent(vote, ballots)
    tail = f"Abstained: {', '.join(voter_name(v) for v in abstained)}." if abstained else "Everyone answered."
    return f"🗳️ Vote closed: “{vote.question}” — {' · '.join(parts)} → {outcome}. {tail}"


def reminder_text(vote: VoteRow, waiting: Sequence[str], close_in: float) -> str:
    who = ", ".join(voter_name(v) for v in waiting)
    return (
        f"⏳ Vote still open: “{vote.question}” — not answered yet: {who}. It closes in {duration(close_in)}."
    )


class VoteKeeper:
    def __init__(
        self,
        store: Store,
        instance: str,
        *,
        remind_after: float,
        close_after: float,
    ) -> None:
        self._store = store
        self._me = instance
        self.remind_after = remind_after
        self.close_after = close_after

    # -- opening, answering -----------------------------------------------------------------

    def open(
        self,
        *,
        room: str,
        thread_ts: str,
        question: str,
        options: Sequence[str],
        humans: Sequence[str],
        bots: Sequence[str],
        post_key: str,
        now: float,
    ) -> int:
        """Inside the turn's transaction: the vote's row and its question's post."""
        vote_id = self._store.votes.open(
            room=room,
            thread_ts=thread_ts,
            instance=self._me,
            question=question,
            options=options,
            humans=humans,
            bots=bots,
            post_key=post_key,
            now=now,
        )
        self._store.outbox.enqueue(
            instance=self._me,
            dedupe_key=post_key,
            purpose="vote",
            vote_id=vote_id,
            channel=room,
            thread_ts=thread_ts,
            text=question_text(self._me, question, options),
        )
        log.info("vote opened", instance=self._me, vote=vote_id, room=room, voters=len(humans) + len(bots))
        return vote_id

    def cast(self, vote: VoteRow, *, voter: str, kind: str, choice: str, now: float) -> bool:
        """Inside a transaction: a ballot on an open vote (False when it has closed); the
        vote closes at once when everyone it waits for has answered."""
        current = self._store.votes.get(vote.id)
        if current is None or not current.is_open:
            log.info("ballot refused", instance=self._me, vote=vote.id, voter=voter, reason="vote closed")
            return False
        self._store.votes.cast(vote.id, voter=voter, kind=kind, choice=choice, now=now)
        log.info("ballot cast", instance=self._me, vote=vote.id, voter=voter, kind=kind)
        ballots = self._store.votes.ballots(vote.id)
        if current.electorate and not silent(current, ballots):
            self.close(current, now)
        return True

    def cast_human(self, vote_id: int, option: int, *, slack_user: str, now: float) -> bool:
        """A person's click on one of the question's buttons."""
        vote = self._store.votes.get(vote_id)
        if vote is None or not 0 <= option < len(vote.options):
            log.info(
                "vote click refused", instance=self._me, vote=vote_id, user=slack_user, reason="no such vote"
            )
            return False
        return self.cast(
            vote, voter=human_voter(slack_user), kind="human", choice=vote.options[option], now=now
        )

    # -- the clock's part -------------------------------------------------------------------

    def close(self, vote: VoteRow, now: float) -> bool:
        """Inside a transaction: close it and post the result (once: the claim is the
        guarded update of its status)."""
        ballots = self._store.votes.ballots(vote.id)
        result = result_text(vote, ballots)
        if not self._store.votes.close(vote.id, result, now):
            return False
        outbox = self._store.outbox
        outbox.enqueue(
            instance=vote.instance,
            dedupe_key=f"vote-result:{vote.id}",
            purpose="notice",
            channel=vote.room,
            thread_ts=vote.thread_ts,
            text=result,
        )
        # The question's buttons give way to the result (the edge renders it from the row).
        outbox.enqueue(
            instance=vote.instance,
            dedupe_key=f"vote-closed:{vote.id}",
            kind="update",
            purpose="vote",
            vote_id=vote.id,
            channel=vote.room,
            update_ts=vote.ts,
            update_of=None if vote.ts else vote.post_key,
            text=f"{question_text(vote.instance, vote.question, vote.options)}\n{result}",
        )
        log.info(
            "vote closed",
            instance=self._me,
            vote=vote.id,
            ballots=len(ballots),
            abstained=len(silent(vote, ballots)),
        )
        return True

    def remind(self, vote: VoteRow, now: float) -> bool:
        """Inside a transaction: name who has not answered, once."""
        if not self._store.votes.claim_reminder(vote.id, now):
            return False
        waiting = silent(vote, self._store.votes.ballots(vote.id))
        text = reminder_text(vote, waiting, self.close_after)
        self._store.outbox.enqueue(
            instance=vote.instance,
            dedupe_key=f"vote-remind:{vote.id}",
            purpose="notice",
            channel=vote.room,
            thread_ts=vote.thread_ts,
            text=text,
        )
        log.info("vote reminder", instance=self._me, vote=vote.id, waiting=len(waiting))
        return True

    def due(self, vote: VoteRow, now: float) -> str | None:
        """What the clock owes this open vote now: "remind", "close" or None."""
        if vote.posted_at is None:
            return None
        if vote.reminded_at is None:
            return "remind" if now >= vote.posted_at + self.remind_after else None
        return "close" if now >= vote.reminded_at + self.close_after else None
