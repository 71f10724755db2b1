-- A sampled write request names its write's kind (`remove-follower` the longest), not only follow/unfollow.
ALTER TABLE write_request_samples MODIFY action VARCHAR(16) NOT NULL;
