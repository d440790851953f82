"""The bundle model's code as MLflow logs it ("models from code": MLflow copies this file
into the model and runs it to load the model). Nothing imports it; see
flashml/jobs/bundle_model.py."""

import mlflow.models

from flashml.jobs.bundle_model import BundleModel

mlflow.models.set_model(BundleModel())
