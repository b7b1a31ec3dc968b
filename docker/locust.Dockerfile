# Locust with the Triton client: the image of the locust-master, locust-worker and sweep
# services. The load-test code itself (loadtest/) and the photos are mounted, not copied.
#
# Build context: docker/ (nothing from it is copied).
FROM locustio/locust:2.47.0

# The image's Python is 3.13 (numpy 1.26 has no wheels for it): numpy 2 is fine here, on
# the client side; only the server's Python-backend environment must keep numpy < 2.
# matplotlib and rich are for the sweep's plots and progress; shapely for judging a detector's
# boxes under load against its answer alone (the detection task's rule, loadtest/answers.py).
RUN pip install --no-cache-dir \
        "tritonclient[http,grpc]==2.73.0" \
        numpy==2.5.5 \
        matplotlib==3.11.2 \
        rich==15.0.0 \
        shapely==2.2.0 \
    && python -c "import tritonclient.grpc, tritonclient.http, numpy, matplotlib, rich, shapely"

ENV PYTHONPATH=/opt/loadtest
