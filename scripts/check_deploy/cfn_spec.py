"""The CloudFormation resource types the deploy recipes may use, each with its
required properties, the properties it accepts and the attributes Fn::GetAtt
may read. Taken from the AWS CloudFormation resource specification
(https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-template-resource-type-ref.html)
for these types; a type outside this list is refused, so a new one is added
here, with its spec, on purpose."""

SPEC = {
    "AWS::EC2::VPC": dict(
        required={"CidrBlock"},
        allowed={"CidrBlock", "EnableDnsHostnames", "EnableDnsSupport", "InstanceTenancy",
                 "Ipv4IpamPoolId", "Ipv4NetmaskLength", "Tags"},
        attrs={"CidrBlock", "CidrBlockAssociations", "DefaultNetworkAcl", "DefaultSecurityGroup",
               "Ipv6CidrBlocks", "VpcId"}),
    "AWS::EC2::Subnet": dict(
        required={"VpcId"},
        allowed={"VpcId", "CidrBlock", "AvailabilityZone", "AvailabilityZoneId",
                 "MapPublicIpOnLaunch", "Ipv6CidrBlock", "Tags"},
        attrs={"AvailabilityZone", "CidrBlock", "NetworkAclAssociationId", "SubnetId", "VpcId"}),
    "AWS::EC2::InternetGateway": dict(required=set(), allowed={"Tags"}, attrs={"InternetGatewayId"}),
    "AWS::EC2::VPCGatewayAttachment": dict(
        required={"VpcId"}, allowed={"VpcId", "InternetGatewayId", "VpnGatewayId"}, attrs=set()),
    "AWS::EC2::RouteTable": dict(required={"VpcId"}, allowed={"VpcId", "Tags"}, attrs={"RouteTableId"}),
    "AWS::EC2::Route": dict(
        required={"RouteTableId"},
        allowed={"RouteTableId", "DestinationCidrBlock", "DestinationIpv6CidrBlock", "GatewayId",
                 "NatGatewayId", "InstanceId", "NetworkInterfaceId", "TransitGatewayId",
                 "VpcPeeringConnectionId", "VpcEndpointId"},
        attrs=set()),
    "AWS::EC2::SubnetRouteTableAssociation": dict(
        required={"RouteTableId", "SubnetId"}, allowed={"RouteTableId", "SubnetId"}, attrs={"Id"}),
    "AWS::EC2::EIP": dict(required=set(), allowed={"Domain", "InstanceId", "Tags"},
                          attrs={"AllocationId", "PublicIp"}),
    "AWS::EC2::NatGateway": dict(
        required={"SubnetId"}, allowed={"SubnetId", "AllocationId", "ConnectivityType", "Tags"},
        attrs={"NatGatewayId"}),
    "AWS::EC2::PlacementGroup": dict(
        required=set(), allowed={"Strategy", "PartitionCount", "SpreadLevel", "Tags"}, attrs={"GroupName"}),
    "AWS::EC2::SecurityGroup": dict(
        required={"GroupDescription"},
        allowed={"GroupDescription", "GroupName", "SecurityGroupEgress", "SecurityGroupIngress",
                 "VpcId", "Tags"},
        attrs={"GroupId", "VpcId"}),
    "AWS::EC2::SecurityGroupIngress": dict(
        required={"IpProtocol"},
        allowed={"IpProtocol", "GroupId", "GroupName", "CidrIp", "CidrIpv6", "Description", "FromPort",
                 "ToPort", "SourceSecurityGroupId", "SourceSecurityGroupName",
                 "SourceSecurityGroupOwnerId", "SourcePrefixListId"},
        attrs={"Id"}),
    "AWS::EC2::SecurityGroupEgress": dict(
        required={"GroupId", "IpProtocol"},
        allowed={"GroupId", "IpProtocol", "CidrIp", "CidrIpv6", "Description", "FromPort", "ToPort",
                 "DestinationSecurityGroupId", "DestinationPrefixListId"},
        attrs={"Id"}),
    "AWS::EC2::Instance": dict(
        required=set(),
        allowed={"ImageId", "InstanceType", "KeyName", "SubnetId", "SecurityGroupIds", "UserData",
                 "IamInstanceProfile", "PlacementGroupName", "BlockDeviceMappings", "Tags",
                 "LaunchTemplate", "NetworkInterfaces", "AvailabilityZone", "EbsOptimized",
                 "PrivateIpAddress", "SourceDestCheck", "Monitoring", "DisableApiTermination"},
        attrs={"AvailabilityZone", "InstanceId", "PrivateDnsName", "PrivateIp", "PublicDnsName",
               "PublicIp"}),
    "AWS::EC2::LaunchTemplate": dict(
        required={"LaunchTemplateData"},
        allowed={"LaunchTemplateData", "LaunchTemplateName", "TagSpecifications", "VersionDescription"},
        attrs={"DefaultVersionNumber", "LatestVersionNumber", "LaunchTemplateId"}),
    "AWS::AutoScaling::AutoScalingGroup": dict(
        required={"MaxSize", "MinSize"},
        allowed={"MaxSize", "MinSize", "DesiredCapacity", "LaunchTemplate", "VPCZoneIdentifier",
                 "PlacementGroup", "Tags", "HealthCheckType", "HealthCheckGracePeriod",
                 "AutoScalingGroupName", "CapacityRebalance", "MixedInstancesPolicy",
                 "TerminationPolicies", "Cooldown", "NewInstancesProtectedFromScaleIn"},
        attrs=set()),
    "AWS::FSx::FileSystem": dict(
        required={"FileSystemType", "SubnetIds"},
        allowed={"FileSystemType", "SubnetIds", "SecurityGroupIds", "StorageCapacity", "StorageType",
                 "LustreConfiguration", "FileSystemTypeVersion", "KmsKeyId", "Tags", "BackupId"},
        attrs={"DNSName", "LustreMountName", "ResourceARN", "RootVolumeId"}),
    "AWS::EFS::FileSystem": dict(
        required=set(),
        allowed={"Encrypted", "PerformanceMode", "ThroughputMode", "ProvisionedThroughputInMibps",
                 "FileSystemTags", "KmsKeyId", "LifecyclePolicies", "BackupPolicy"},
        attrs={"Arn", "FileSystemId"}),
    "AWS::EFS::MountTarget": dict(
        required={"FileSystemId", "SecurityGroups", "SubnetId"},
        allowed={"FileSystemId", "SecurityGroups", "SubnetId", "IpAddress"},
        attrs={"Id", "IpAddress"}),
    "AWS::IAM::Role": dict(
        required={"AssumeRolePolicyDocument"},
        allowed={"AssumeRolePolicyDocument", "ManagedPolicyArns", "Policies", "Path", "RoleName",
                 "Description", "MaxSessionDuration", "PermissionsBoundary", "Tags"},
        attrs={"Arn", "RoleId"}),
    "AWS::IAM::InstanceProfile": dict(
        required={"Roles"}, allowed={"Roles", "Path", "InstanceProfileName"}, attrs={"Arn"}),
    "AWS::CloudFormation::WaitConditionHandle": dict(required=set(), allowed=set(), attrs=set()),
    "AWS::CloudFormation::WaitCondition": dict(
        required=set(), allowed={"Count", "Handle", "Timeout"}, attrs={"Data"}),
    "AWS::SSM::Parameter": dict(
        required={"Type", "Value"},
        allowed={"Type", "Value", "Name", "Description", "Tier", "AllowedPattern", "DataType", "Tags"},
        attrs={"Type", "Value"}),
}

PSEUDO_PARAMETERS = {
    "AWS::AccountId", "AWS::NotificationARNs", "AWS::NoValue", "AWS::Partition", "AWS::Region",
    "AWS::StackId", "AWS::StackName", "AWS::URLSuffix",
}

PARAMETER_TYPES = {
    "String", "Number", "List<Number>", "CommaDelimitedList",
    "AWS::EC2::KeyPair::KeyName", "AWS::EC2::Image::Id", "AWS::EC2::Instance::Id",
    "AWS::EC2::SecurityGroup::Id", "AWS::EC2::Subnet::Id", "AWS::EC2::VPC::Id",
    "AWS::EC2::AvailabilityZone::Name", "List<AWS::EC2::Subnet::Id>",
    "List<AWS::EC2::SecurityGroup::Id>", "List<AWS::EC2::AvailabilityZone::Name>",
    "AWS::SSM::Parameter::Name",
}

TOP_LEVEL = {"AWSTemplateFormatVersion", "Description", "Metadata", "Parameters", "Rules", "Mappings",
             "Conditions", "Transform", "Resources", "Outputs"}

RESOURCE_KEYS = {"Type", "Properties", "DependsOn", "Condition", "Metadata", "DeletionPolicy",
                 "UpdateReplacePolicy", "CreationPolicy", "UpdatePolicy"}


# One level below the top: property -> (required, allowed) of its value, or of
# each item when the name ends in []. Values that are intrinsics are skipped.
_TAG = ({"Key", "Value"}, {"Key", "Value"})
NESTED = {
    "AWS::EC2::LaunchTemplate": {
        "LaunchTemplateData": (set(), {
            "ImageId", "InstanceType", "KeyName", "IamInstanceProfile", "SecurityGroupIds", "SecurityGroups",
            "UserData", "BlockDeviceMappings", "NetworkInterfaces", "Placement", "TagSpecifications",
            "MetadataOptions", "InstanceMarketOptions", "EbsOptimized", "Monitoring", "CpuOptions"}),
    },
    "AWS::AutoScaling::AutoScalingGroup": {
        "LaunchTemplate": ({"Version"}, {"LaunchTemplateId", "LaunchTemplateName", "Version"}),
        "MixedInstancesPolicy": ({"LaunchTemplate"}, {"LaunchTemplate", "InstancesDistribution"}),
        "Tags[]": ({"Key", "Value", "PropagateAtLaunch"}, {"Key", "Value", "PropagateAtLaunch"}),
    },
    "AWS::EC2::SecurityGroup": {
        "SecurityGroupIngress[]": ({"IpProtocol"}, {
            "IpProtocol", "FromPort", "ToPort", "CidrIp", "CidrIpv6", "Description", "SourceSecurityGroupId",
            "SourceSecurityGroupName", "SourceSecurityGroupOwnerId", "SourcePrefixListId"}),
        "Tags[]": _TAG,
    },
    "AWS::FSx::FileSystem": {
        "LustreConfiguration": (set(), {
            "DeploymentType", "PerUnitStorageThroughput", "ImportPath", "ExportPath", "DataCompressionType",
            "AutoImportPolicy", "CopyTagsToBackups", "WeeklyMaintenanceStartTime", "DriveCacheType",
            "ImportedFileChunkSize", "AutomaticBackupRetentionDays", "DailyAutomaticBackupStartTime"}),
    },
    "AWS::EC2::VPC": {"Tags[]": _TAG},
    "AWS::EC2::Subnet": {"Tags[]": _TAG},
    "AWS::EC2::Instance": {"Tags[]": _TAG},
}
