"""Strand's hooks for the schemathesis run (loaded through SCHEMATHESIS_HOOKS): how to send a plugin upload,
and our own check — every error answer is problem+json with a stable code, whatever the input."""

import schemathesis

# Plugin uploads are raw bytes, sent like any binary body.
schemathesis.serializer.alias("application/wasm", "application/octet-stream")
# Imports are text, line by line: NDJSON or CSV.
schemathesis.serializer.alias(["application/x-ndjson", "text/csv"], "text/plain")


@schemathesis.check
def errors_are_problem_json(ctx, response, case):
    if response.status_code < 400:
        return None
    content_type = ",".join(response.headers.get("content-type", []))
    if not content_type.startswith("application/problem+json"):
        raise AssertionError(f"error {response.status_code} is {content_type!r}, not application/problem+json")
    problem = response.json()
    if not isinstance(problem.get("code"), str) or problem.get("status") != response.status_code:
        raise AssertionError(f"error {response.status_code} without a code or with another status: {problem}")
    return None
