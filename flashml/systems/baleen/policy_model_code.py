"""The policy bundle model's code as MLflow logs it ("models from code": MLflow copies this
file into the model and runs it to load the model, instead of unpickling an object).
Nothing imports it; see flashml/systems/baleen/policy_model.py."""

import mlflow.models

from flashml.systems.baleen.policy_model import PolicyBundleModel

mlflow.models.set_model(PolicyBundleModel())
