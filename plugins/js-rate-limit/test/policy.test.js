import { test } from "node:test";
import assert from "node:assert/strict";
import { decide } from "../src/policy.js";

test("a follow and an unfollow charge different buckets of their user", () => {
  assert.equal(decide({ user: 7, action: "follow", target: 8, nowMs: 0n }).val.key, "follow:7");
  assert.equal(decide({ user: 7, action: "unfollow", target: 8, nowMs: 0n }).val.key, "unfollow:7");
});
