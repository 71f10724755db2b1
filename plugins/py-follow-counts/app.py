"""follow-counts in Python: `followings:{user}` and `followers:{user}`, +1 per follow, -1 per unfollow.

The same effects as the bundled Rust projector, so the two can be compared event for event (and in the
plugin benchmark). Built by `strand plugin build` with componentize-py from `pyproject.toml`.
"""

from typing import List

from wit_world import exports
from wit_world.imports import log
from wit_world.imports.types import Action, Effect, Effect_CounterAdd, Key, Level, RelationEvent


def effects(event: RelationEvent) -> List[Effect]:
    delta = 1 if event.action == Action.FOLLOW else -1
    return [
        Effect_CounterAdd((Key("followings", [event.follower]), delta)),
        Effect_CounterAdd((Key("followers", [event.followee]), delta)),
    ]


class Projection(exports.Projection):
    def project(self, tenant: str, events: List[RelationEvent]) -> List[List[Effect]]:
        projected = []
        for index, event in enumerate(events):
            if event.follower == event.followee:
                log.log(Level.WARN, index, "a self-follow reached the projector")
            projected.append(effects(event))
        return projected
