"""What the cloud holds and the engines that make it: the Pulumi program and its driver,
the FCOS snapshot's pipeline, the admin kubeconfig the deployment issues."""
