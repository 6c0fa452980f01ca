"""The web UI of a cluster (issue 29): its statements with their stage DAGs, task timelines and
shuffles, and its workers, as pages and as a JSON API. The top layer, beside ``cli``: it reads
``api`` and ``runtime``, and only ``cli`` and ``qengine.connect(ui=True)`` import it."""
