// The bundled policy in JavaScript: per user and action, a 100-token bucket refilled at 1 token a second.
// Plain functions of plain values, so `node --test` checks them natively.

export const CAPACITY = 100;
export const REFILL_PER_SECOND = 1.0;

/** The decision for one write request: charge the bucket of its user and action. */
export function decide(request) {
  const key = `${request.action}:${request.user}`;
  return { tag: "charge", val: { key, capacity: CAPACITY, refillPerSecond: REFILL_PER_SECOND, cost: 1 } };
}
