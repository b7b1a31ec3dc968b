"""Triton Python-backend models. Imported only inside the server, where
``triton_python_backend_utils`` exists; the model repository's ``model.py`` files
re-export the ``TritonPythonModel`` classes defined here."""
