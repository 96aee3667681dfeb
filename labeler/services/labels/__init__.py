"""What labels become: agreement and gold accuracy, the record browser and corrections, added criteria and
their rows, label files in and out (imports, exports, dataset cards), and rewards from people (rated
rollouts, mixed rewards, active learning's queue order)."""
