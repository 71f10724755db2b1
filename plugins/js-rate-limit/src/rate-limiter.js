// The component: exports `strand:plugin/policy` for the rate-limiter world, one decision per request.
import { log } from "strand:plugin/log@0.4.0";
import { decide } from "./policy.js";

export const policy = {
  decide(tenant, requests) {
    return requests.map((request, index) => {
      if (request.user === request.target) {
        log("warn", index, "a self-follow reached the policy");
      }
      return decide(request);
    });
  },
};
