"""Native unit test: `componentize-py -d ../../wit/strand.wit -w projector bindings .` then `python3 -m unittest`."""

import unittest

from app import effects
from wit_world.imports.types import Action, Effect_CounterAdd, Key, RelationEvent


class Counts(unittest.TestCase):
    def test_an_unfollow_takes_back_what_a_follow_added(self):
        event = RelationEvent(Action.UNFOLLOW, 1, 2, 1, 0, False)
        self.assertEqual(effects(event)[1], Effect_CounterAdd((Key("followers", [2]), -1)))


if __name__ == "__main__":
    unittest.main()
