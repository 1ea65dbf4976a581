"""The queue's device stages (:mod:`.stages`) and the ``anb queue`` / ``anb worker`` commands
(:mod:`.cli`)."""
