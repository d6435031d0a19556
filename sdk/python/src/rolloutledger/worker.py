"""The rollout worker's view of one attempt: :class:`Attempt`.

::

    with ledger.attempt(run, attempt="g-7/a0", group="g-7", task="t-3",
                        engine="engine-17", vm="vm-4", fork_ms=38) as att:
        att.turn(policy_version=3, prompt_tokens=900, token_ids=ids,
                 logprobs=lps, text=completion, finish="tool_call", latency_ms=800)
        att.tool_call(tool="bash", exit_code=0, duration_ms=1200, output_bytes=5000,
                      input=command, output=output)
        att.compacted(tokens_before=120_000, tokens_after=30_000)
        att.finish("submitted")

Whole sequences (turn.generated version 3): pass each turn's whole prompt
as ``prompt_ids`` (the token ids the engine was given) and the attempt
records the turn as a child of the previous one when that turn's prompt and
completion are a prefix of it, storing only the new tokens; otherwise
(the first turn, a rewritten context) the whole prompt, with the point
where it diverged from the previous turn. Trainers then get every token of
each sequence from the first prompt token, loss-masked where the model did
not generate it, and ``sampling`` gives them the temperature.

Entering emits ``attempt.started``; each call emits its fact at once (turn
indices from 0, tool-call indices from 0 within their turn); leaving emits
``attempt.finished`` (outcome "submitted" unless :meth:`Attempt.finish` said
otherwise) on a normal exit, or ``attempt.failed`` when :meth:`Attempt.fail`
was called or an infrastructure exception escapes (an
:class:`~rolloutledger.errors.InfrastructureError`, any exception with a
true ``infrastructure`` attribute, or one of the types given as ``infra``).
The exception still propagates. Any other exception is the worker's own bug:
nothing is emitted for it, and the attempt stays open until the scheduler
closes its group. Facts are emitted through the client's buffer, in order.
"""

from __future__ import annotations

from typing import Sequence

from .facts import (
    AttemptFailed,
    AttemptFinished,
    AttemptStarted,
    ContextCompacted,
    Divergence,
    EngineInfo,
    Event,
    Sampling,
    ToolCalled,
    TurnGenerated,
)

__all__ = ["Attempt"]

_MAX_REASON_BYTES = 4096


def _reason(exc: BaseException) -> str:
    """A reason the ledger accepts: the exception's message (or its type),
    without NUL characters, cut to a few KiB."""
    text = (str(exc) or type(exc).__name__).replace("\x00", " ")
    b = text.encode("utf-8", "replace")
    if len(b) > _MAX_REASON_BYTES:
        text = b[:_MAX_REASON_BYTES].decode("utf-8", "ignore")
    return text.strip() or type(exc).__name__


class Attempt:
    def __init__(
        self,
        ledger,
        run: str,
        *,
        attempt: str,
        group: str,
        task: str,
        engine: str,
        vm: str,
        fork_ms: int = 0,
        retry_of: str | None = None,
        source: str | None = None,
        infra: tuple[type[BaseException], ...] = (),
    ):
        self.ledger = ledger
        self.run = run
        self.attempt = attempt
        self.group = group
        self.task = task
        self.source = source
        self.infra = tuple(infra)
        self._start = AttemptStarted(
            attempt=attempt, group=group, task=task, engine=engine, vm=vm, fork_ms=fork_ms, retry_of=retry_of
        )
        self.turns = 0  # turns emitted so far; the next turn's index
        self.policy_versions: list[int] = []  # per turn (its first token's), in order
        self.completion_tokens = 0
        self._calls = 0  # tool calls of the current turn
        # The previous turn's whole sequence (prompt and completion ids),
        # when it was given with prompt_ids.
        self._prev_seq: list[int] | None = None
        self.outcome: str | None = None
        self.failure: str | None = None
        self.events: list[Event] = []
        self.closed = False

    def _emit(self, fact) -> Event:
        if self.closed:
            raise RuntimeError(f"attempt {self.attempt} is already closed")
        ev = self.ledger.emit(self.run, fact, source=self.source)
        self.events.append(ev)
        return ev

    def __enter__(self) -> "Attempt":
        self._emit(self._start)
        return self

    def _last_turn(self, turn: int | None) -> int:
        if turn is not None:
            return turn
        if self.turns == 0:
            raise ValueError(f"attempt {self.attempt} has no turn yet; pass turn= explicitly")
        return self.turns - 1

    def turn(
        self,
        *,
        prompt_tokens: int | None = None,
        finish: str,
        policy_version: int | None = None,
        version_segments=None,
        completion_tokens: int | None = None,
        cached_tokens: int = 0,
        token_ids: Sequence[int] | None = None,
        logprobs: Sequence[float] | None = None,
        observation_token_ids: Sequence[int] | None = None,
        text: str | None = None,
        latency_ms: int = 0,
        prompt_ids: Sequence[int] | None = None,
        parent: int | None = None,
        prefix_tokens: int | None = None,
        sampling: Sampling | None = None,
        engine: EngineInfo | None = None,
        tags: Sequence[str] | None = None,
    ) -> TurnGenerated:
        """Emits the next turn (index 0, 1, ...) generated by weights
        ``policy_version``, or by the versions of ``version_segments``
        (``[(0, 3), (1500, 4)]``: the weights changed at token 1,500).
        ``completion_tokens`` defaults to the number of token ids; ``text``
        is the completion's text (cut to 64 KiB).

        ``prompt_ids`` is the turn's whole prompt (``prompt_tokens``
        defaults to its length): the turn is then written as version 3,
        its parent and new tokens worked out against the previous turn's
        prompt and completion (see the module's docs). Or give ``parent``,
        ``prefix_tokens`` and the new tokens as ``observation_token_ids``
        yourself. ``sampling`` (its ``temperature`` reaches the samples),
        ``engine`` and ``tags`` are version 3's as well."""
        if prompt_ids is not None:
            if observation_token_ids is not None or parent is not None or prefix_tokens is not None:
                raise ValueError("give prompt_ids, or parent, prefix_tokens and observation_token_ids; not both")
            prompt = [int(x) for x in prompt_ids]
            if prompt_tokens is None:
                prompt_tokens = len(prompt)
            elif prompt_tokens != len(prompt):
                raise ValueError(f"prompt_tokens {prompt_tokens} but {len(prompt)} prompt_ids")
            prev, shared = self._prev_seq, 0
            if prev is not None:
                while shared < min(len(prev), len(prompt)) and prev[shared] == prompt[shared]:
                    shared += 1
            diverged = None
            if shared > 0:
                parent, prefix_tokens = self.turns - 1, shared
                if shared < len(prev):
                    diverged = Divergence(turn=self.turns - 1, at=shared)
            elif prev is not None:
                diverged = Divergence(turn=self.turns - 1, at=0)
            observation_token_ids = prompt[shared:]
            self._prev_seq = prompt + [int(x) for x in token_ids] if token_ids is not None else None
        else:
            diverged = None
            self._prev_seq = None
        if prompt_tokens is None:
            raise ValueError("prompt_tokens is required when prompt_ids are not given")
        if completion_tokens is None:
            if token_ids is None:
                raise ValueError("completion_tokens is required when token_ids are not given")
            completion_tokens = len(token_ids)
        if (policy_version is None) == (version_segments is None):
            raise ValueError("give policy_version or version_segments")
        fact = TurnGenerated(
            attempt=self.attempt,
            turn=self.turns,
            policy_version=policy_version,
            version_segments=version_segments,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached_tokens=cached_tokens,
            observation_token_ids=observation_token_ids,
            token_ids=token_ids,
            logprobs=logprobs,
            text=text,
            finish=finish,
            latency_ms=latency_ms,
            parent=parent,
            prefix_tokens=prefix_tokens,
            diverged=diverged,
            prompt_ids_from="client" if prompt_ids is not None else None,
            sampling=sampling,
            engine=engine,
            tags=sorted(tags) if tags is not None else None,
        )
        self._emit(fact)
        self.turns += 1
        self.policy_versions.append(int(fact.version_segments[0][1]))
        self.completion_tokens += int(completion_tokens)
        self._calls = 0
        return fact

    def tool_call(
        self,
        *,
        tool: str,
        exit_code: int = 0,
        duration_ms: int = 0,
        output_bytes: int = 0,
        to_file: bool = False,
        background: bool = False,
        timed_out: bool = False,
        input: str | None = None,
        output: str | None = None,
        turn: int | None = None,
        call: int | None = None,
    ) -> ToolCalled:
        """Emits a tool call of the last turn (or of ``turn``); calls are
        numbered from 0 within their turn. ``input`` and ``output`` are its
        text, each cut to 64 KiB (``output_bytes`` stays the whole output's
        size)."""
        t = self._last_turn(turn)
        if call is None:
            call = self._calls
        fact = ToolCalled(
            attempt=self.attempt,
            turn=t,
            call=call,
            tool=tool,
            exit_code=exit_code,
            duration_ms=duration_ms,
            output_bytes=output_bytes,
            to_file=to_file,
            background=background,
            timed_out=timed_out,
            input=input,
            output=output,
        )
        self._emit(fact)
        self._calls = max(self._calls, call + 1)
        return fact

    def compacted(self, *, tokens_before: int, tokens_after: int, turn: int | None = None) -> ContextCompacted:
        """Emits a context compaction after the last turn (or ``turn``): the
        turns after it form a new training segment."""
        fact = ContextCompacted(
            attempt=self.attempt, turn=self._last_turn(turn), tokens_before=tokens_before, tokens_after=tokens_after
        )
        self._emit(fact)
        return fact

    def finish(self, outcome: str = "submitted"):
        """Sets the outcome recorded on a normal exit: "submitted",
        "turn_budget", "context_budget" or "timeout"."""
        self.outcome = outcome

    def fail(self, reason: str):
        """Records the attempt as lost to the infrastructure on exit, without
        raising."""
        self.failure = reason

    def _is_infra(self, exc: BaseException) -> bool:
        return bool(getattr(exc, "infrastructure", False)) or (bool(self.infra) and isinstance(exc, self.infra))

    def __exit__(self, exc_type, exc, tb):
        if exc is None:
            if self.failure is not None:
                self._emit(AttemptFailed(attempt=self.attempt, reason=self.failure))
            else:
                self._emit(AttemptFinished(attempt=self.attempt, outcome=self.outcome or "submitted"))
        elif self._is_infra(exc):
            self._emit(AttemptFailed(attempt=self.attempt, reason=_reason(exc)))
        self.closed = True
        return False
