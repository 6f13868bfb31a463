"""One batch of users' event streams, as the HSTU ranker (``dlrmv4``) takes it: each user's
history in time order followed by its candidates, jagged (no padding), and a label per candidate.

The contract between the event-stream datasets (:mod:`harness.reference.data.events`) and the
HSTU model (:mod:`harness.reference.models.hstu`). Per user ``u`` of the batch, its sequence is
``history_lengths[u]`` history events then ``candidate_lengths[u]`` candidates; the users'
sequences are concatenated in batch order into the per-event tensors (``item``, ``artist``,
``album``, ``action``, ``timestamp``), so user ``u``'s events start at
``offsets()[u]``. A candidate is an event the model scores: its item, artist, album and
timestamp are known, its action is not (``action`` holds :data:`UNKNOWN_ACTION` there).
``labels`` and ``label_mask`` hold one value per candidate, in the same order as the candidates
appear in the per-event tensors. ``cross`` holds each user's ids in the dataset's hashed cross
features (:mod:`harness.reference.data.crosses`; ``[B, 0]`` when it has none).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

#: the action id of a candidate (what the user did with it is what the model predicts)
UNKNOWN_ACTION = 0


@dataclass(frozen=True)
class EventBatch:
    uid: torch.Tensor  # int64 [B]: the users (a contextual feature)
    history_lengths: torch.Tensor  # int64 [B]
    candidate_lengths: torch.Tensor  # int64 [B], each >= 1
    item: torch.Tensor  # int64 [N], N = sum(history_lengths + candidate_lengths)
    artist: torch.Tensor  # int64 [N]
    album: torch.Tensor  # int64 [N]
    action: torch.Tensor  # int64 [N]: the event's type (listen, like, ...), UNKNOWN_ACTION on candidates
    timestamp: torch.Tensor  # int64 [N]: seconds, non-decreasing within a user's history
    labels: torch.Tensor  # float32 [C], C = sum(candidate_lengths): 1.0 when the candidate was listened (> 50%)
    label_mask: torch.Tensor  # bool [C]: the candidates that carry a label (the loss and the AUC use only these)
    cross: torch.Tensor  # int64 [B, K]: each user's id in each of the dataset's K cross features (contextual)

    @property
    def users(self) -> int:
        return int(self.uid.numel())

    @property
    def lengths(self) -> torch.Tensor:
        """Each user's sequence length (history and candidates)."""
        return self.history_lengths + self.candidate_lengths

    def offsets(self) -> torch.Tensor:
        """int64 [B + 1]: where each user's events start in the per-event tensors, and the end."""
        return torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(self.lengths, 0)])

    def is_candidate(self) -> torch.Tensor:
        """bool [N]: which events are candidates (the last ``candidate_lengths[u]`` of each user)."""
        lengths = self.lengths
        position = torch.arange(int(lengths.sum())) - torch.repeat_interleave(self.offsets()[:-1], lengths)
        return position >= torch.repeat_interleave(self.history_lengths, lengths)

    def check(self) -> None:
        """Raise ValueError when the tensors do not describe one consistent batch."""
        b, n, c = self.users, int(self.lengths.sum()), int(self.candidate_lengths.sum())
        for name, size in (("history_lengths", b), ("candidate_lengths", b), ("item", n), ("artist", n),
                           ("album", n), ("action", n), ("timestamp", n), ("labels", c), ("label_mask", c)):
            if getattr(self, name).shape != (size,):
                raise ValueError(f"EventBatch.{name} has shape {tuple(getattr(self, name).shape)}, expected ({size},)")
        if self.cross.dim() != 2 or self.cross.shape[0] != b:
            raise ValueError(f"EventBatch.cross has shape {tuple(self.cross.shape)}, expected ({b}, K)")
        if b and int(self.candidate_lengths.min()) < 1:
            raise ValueError("EventBatch: every user needs at least one candidate")
        if b and int(self.history_lengths.min()) < 0:
            raise ValueError("EventBatch: a negative history length")

    def to(self, device: torch.device | str) -> EventBatch:
        return EventBatch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})
