"""Detection's building blocks, pure and typed, for the task layer to register: the resizes
detectors train with and their back-mapping (:mod:`.geometry`, :mod:`.dali_resize`), boxes
and IoU (:mod:`.boxes`), postprocessors (:mod:`.postprocess`: ``db``, ``yolo``, a user's own),
the reference text detector (:mod:`.detector`), two sides compared (:mod:`.compare`), the
effect on a labeled COCO set (:mod:`.effect`), labeled data rendered onto real photos
(:mod:`.data`) and boxes drawn for the report (:mod:`.draw`)."""
