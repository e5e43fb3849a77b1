-- the basic-auth app keeps users and permissions in their own database
CREATE DATABASE mlflow_auth;
